package main

// The control plane's certificates: one CA (which also signs what the controller manager signs
// for the cluster), the API server's serving certificate, client certificates for the admin and
// each component, and the service-account signing key. ECDSA P-256 throughout (fast to make).

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

type keyPair struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
}

type certRequest struct {
	commonName    string
	organizations []string
	dnsNames      []string
	ips           []net.IP
	server        bool // serverAuth usage (else clientAuth)
}

func newKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func serialNumber() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	return n
}

func newCA(commonName string) (*keyPair, error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	template := &x509.Certificate{
		SerialNumber:          serialNumber(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	return sign(template, template, key, key, keyPEM)
}

// sign makes the certificate template describes for key, signed by parent's signerKey.
func sign(template, parent *x509.Certificate, key, signerKey *ecdsa.PrivateKey, keyPEM []byte) (*keyPair, error) {
	der, err := x509.CreateCertificate(rand.Reader, template, parent, &key.PublicKey, signerKey)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM: keyPEM}, nil
}

func (ca *keyPair) issue(req certRequest) (*keyPair, error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	usage := x509.ExtKeyUsageClientAuth
	if req.server {
		usage = x509.ExtKeyUsageServerAuth
	}
	template := &x509.Certificate{
		SerialNumber: serialNumber(),
		Subject:      pkix.Name{CommonName: req.commonName, Organization: req.organizations},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     req.dnsNames,
		IPAddresses:  req.ips,
	}
	return sign(template, ca.cert, key, ca.key, keyPEM)
}

// loadOrCreateCA reuses dir/ca.crt and dir/ca.key (a restarted server keeps its cluster), or makes them.
func loadOrCreateCA(dir, commonName string) (*keyPair, error) {
	certPEM, certErr := os.ReadFile(filepath.Join(dir, "ca.crt"))
	keyPEM, keyErr := os.ReadFile(filepath.Join(dir, "ca.key"))
	if certErr == nil && keyErr == nil {
		certBlock, _ := pem.Decode(certPEM)
		keyBlock, _ := pem.Decode(keyPEM)
		if certBlock == nil || keyBlock == nil {
			return nil, fmt.Errorf("%s: ca.crt or ca.key is not PEM", dir)
		}
		cert, err := x509.ParseCertificate(certBlock.Bytes)
		if err != nil {
			return nil, err
		}
		key, err := x509.ParseECPrivateKey(keyBlock.Bytes)
		if err != nil {
			return nil, err
		}
		return &keyPair{cert: cert, key: key, certPEM: certPEM, keyPEM: keyPEM}, nil
	}
	if !errors.Is(certErr, os.ErrNotExist) {
		return nil, certErr
	}
	ca, err := newCA(commonName)
	if err != nil {
		return nil, err
	}
	return ca, ca.write(dir, "ca")
}

// write stores name.crt (0644) and name.key (0600) in dir.
func (kp *keyPair) write(dir, name string) error {
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), kp.certPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), kp.keyPEM, 0o600)
}

// caHash is the sha256 of the CA certificate (DER), in hex: what a k3s token's K10 prefix carries.
func caHash(certPEM []byte) (string, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return "", errors.New("the CA certificate is not PEM")
	}
	sum := sha256.Sum256(block.Bytes)
	return hex.EncodeToString(sum[:]), nil
}

// writeServiceAccountKey makes the key the API server signs service-account tokens with (and
// the controller manager signs the tokens it mints), unless dir/sa.key exists.
func writeServiceAccountKey(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "sa.key")); err == nil {
		return nil
	}
	key, keyPEM, err := newKey()
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.key"), keyPEM, 0o600)
}

// kubeconfig is a self-contained kubeconfig (everything embedded) named "default" like k3s's.
// A client certificate when token is empty, a bearer token otherwise.
func kubeconfig(server string, caPEM []byte, client *keyPair, token string) []byte {
	enc := base64.StdEncoding.EncodeToString
	user := fmt.Sprintf("    token: %s\n", token)
	if client != nil {
		user = fmt.Sprintf("    client-certificate-data: %s\n    client-key-data: %s\n", enc(client.certPEM), enc(client.keyPEM))
	}
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: %s
    server: %s
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
preferences: {}
users:
- name: default
  user:
%s`, enc(caPEM), server, user))
}
