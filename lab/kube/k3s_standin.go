package main

// The k3s STAND-IN of the machine lab (docs/kubernetes.md, "Test infrastructure"). Real k3s
// cannot be had here (no GitHub downloads, and its build needs a patched Kubernetes fork), so
// this command answers to the k3s command line that hangar uses, with upstream Kubernetes behind
// it: the control plane, and on every node the kubelet and kube-proxy with Debian's containerd
// (node.go; kwok in place of them with K3S_STANDIN_KUBELET=kwok):
//
//   k3s server [--node-ip IP] [--node-name N] [--tls-san X] [--https-listen-port 6443]
//              [--token T] [--data-dir /var/lib/rancher/k3s] [--write-kubeconfig PATH]
//       etcd, kube-apiserver, kube-controller-manager and kube-scheduler (controlplane.go) on
//       0.0.0.0:6443; the admin kubeconfig at /etc/rancher/k3s/k3s.yaml (0600, server
//       https://127.0.0.1:6443, as k3s writes it); the join token at
//       /var/lib/rancher/k3s/server/node-token (K10<sha256 of the CA>::server:<secret>); and,
//       like k3s's embedded agent, this machine registered as a node (roles control-plane,master).
//   k3s agent --server https://HOST:6443 [--token T] [--node-ip IP] [--node-name N]
//       (the token, as with k3s, from --token or else the environment's K3S_TOKEN: hangar's agent
//       keeps it off the command line)
//       joins this machine as a node: it checks the server's CA against the token's hash, gets
//       a node client certificate (system:node:<name>) by TLS bootstrapping (a bootstrap token
//       derived from the token's secret, a CertificateSigningRequest approved and signed by the
//       controller manager, as kubelets do), and runs the node with those credentials (so the
//       Node authorizer and NodeRestriction apply): containerd, the kubelet (which registers the
//       Node), the pod network (podnet.go) and kube-proxy — or, with K3S_STANDIN_KUBELET=kwok,
//       creates the Node itself and runs kwok for it.
//   both also take --pause-image (the sandbox image, default lab/pause:3.10), --kubelet-arg and
//       --kube-proxy-arg (name=value, given on as --name=value), as k3s does; they import the
//       image archives of <data-dir>/agent/images at start (k3s's airgap images).
//   k3s kubectl …      upstream kubectl, KUBECONFIG defaulting to /etc/rancher/k3s/k3s.yaml
//   k3s --version      says it is the stand-in
//
// What is not k3s: flannel (the stand-in's own VXLAN network, podnet.go), ServiceLB (the stand-in
// writes LoadBalancer addresses and kube-proxy routes them, servicelb.go), no CoreDNS, Traefik,
// local-path provisioner or network policy controller; and when the stand-in stops it takes its
// pods down (real k3s leaves them to k3s-killall.sh). With K3S_STANDIN_KUBELET=kwok, the node's
// kubelet and runtime are simulated (no container runs). Everything else is the upstream code.

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/component-base/version"
	kwokconsts "sigs.k8s.io/kwok/pkg/consts"
)

const (
	k3sDataDir    = "/var/lib/rancher/k3s"
	k3sKubeconfig = "/etc/rancher/k3s/k3s.yaml"
	standinNote   = "hangar's k3s stand-in: upstream Kubernetes — control plane, kubelet and kube-proxy with containerd (with K3S_STANDIN_KUBELET=kwok, nodes and pods simulated by kwok)"
	// bootstrapGroup: what the bootstrap token authenticates as, besides system:bootstrappers.
	bootstrapGroup = "system:bootstrappers:k3s-standin"
)

func runK3s() int {
	if len(os.Args) < 2 {
		fmt.Fprintf(os.Stderr, "usage: k3s server|agent|kubectl [flags]  (%s)\n", standinNote)
		return 2
	}
	switch os.Args[1] {
	case "--version", "-v", "version":
		fmt.Printf("k3s version %s+k3s-standin (%s)\ngo version %s\n", version.Get().GitVersion, standinNote, version.Get().GoVersion)
		return 0
	case "kubectl":
		if os.Getenv("KUBECONFIG") == "" {
			_ = os.Setenv("KUBECONFIG", k3sKubeconfig)
		}
		os.Args = os.Args[1:]
		return runKubectl()
	case "server":
		return k3sServer(os.Args[2:])
	case "agent":
		return k3sAgent(os.Args[2:])
	}
	fmt.Fprintf(os.Stderr, "k3s: %q is not a command of the stand-in (server, agent, kubectl, --version)\n", os.Args[1])
	return 2
}

// nodeOptions are the flags k3s server and agent share.
type nodeOptions struct {
	dataDir       string
	nodeName      string
	nodeIP        string
	token         string
	pauseImage    string
	kubeletArgs   argList // --kubelet-arg: passed to the kubelet as --<arg> (a real node)
	kubeProxyArgs argList // --kube-proxy-arg: the same for kube-proxy
}

func (o *nodeOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.dataDir, "data-dir", k3sDataDir, "k3s's data folder")
	fs.StringVar(&o.nodeName, "node-name", "", "the node's name (default: the hostname)")
	fs.StringVar(&o.nodeIP, "node-ip", "", "the node's address (default: the address of the default route's interface)")
	// As k3s: --token, or K3S_TOKEN from the environment (which keeps it out of /proc/<pid>/cmdline).
	fs.StringVar(&o.token, "token", os.Getenv("K3S_TOKEN"), "the cluster's join token (server: default a new one; agent: required) [$K3S_TOKEN]")
	fs.StringVar(&o.pauseImage, "pause-image", defaultPauseImage, "the pods' sandbox image (imported from <data-dir>/agent/images: nothing is pulled)")
	fs.Var(&o.kubeletArgs, "kubelet-arg", "a kubelet flag, name=value (repeatable)")
	fs.Var(&o.kubeProxyArgs, "kube-proxy-arg", "a kube-proxy flag, name=value (repeatable)")
}

func (o *nodeOptions) complete() error {
	if o.nodeName == "" {
		host, err := os.Hostname()
		if err != nil {
			return err
		}
		o.nodeName = strings.ToLower(host)
	}
	if o.nodeIP == "" {
		ip, err := defaultAddress()
		if err != nil {
			return fmt.Errorf("--node-ip not given and no address found: %w", err)
		}
		o.nodeIP = ip
	}
	return nil
}

// defaultAddress is the local address used to reach the outside (no packet is sent).
func defaultAddress() (string, error) {
	conn, err := net.Dial("udp4", "192.0.2.1:9")
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// joinToken splits a k3s token — K10<hash>::server:<secret>, or a bare secret — into the CA
// hash (empty for a bare secret) and the secret, and derives the bootstrap token (id.secret,
// the format the API server's bootstrap authenticator accepts) from the secret.
type joinToken struct {
	caHash    string
	secret    string
	tokenID   string
	tokenPass string
}

func parseJoinToken(token string) (joinToken, error) {
	var t joinToken
	t.secret = token
	if strings.HasPrefix(token, "K10") {
		rest := strings.TrimPrefix(token, "K10")
		hash, creds, ok := strings.Cut(rest, "::")
		if !ok {
			return t, errors.New("token: K10 token without ::")
		}
		_, secret, ok := strings.Cut(creds, ":")
		if !ok {
			return t, errors.New("token: K10 token without user:secret")
		}
		t.caHash, t.secret = hash, secret
	}
	if t.secret == "" {
		return t, errors.New("token: empty secret")
	}
	id := sha256.Sum256([]byte("k3s-standin bootstrap id\x00" + t.secret))
	pass := sha256.Sum256([]byte("k3s-standin bootstrap secret\x00" + t.secret))
	t.tokenID, t.tokenPass = hex.EncodeToString(id[:])[:6], hex.EncodeToString(pass[:])[:16]
	return t, nil
}

func (t joinToken) bootstrapToken() string { return t.tokenID + "." + t.tokenPass }

func k3sServer(args []string) int {
	logf := stderrLogger("k3s-standin server")
	fs := flag.NewFlagSet("k3s server", flag.ContinueOnError)
	var node nodeOptions
	node.register(fs)
	var sans stringList
	fs.Var(&sans, "tls-san", "more names or addresses for the API server's certificate (repeatable)")
	port := fs.Int("https-listen-port", 6443, "the API server's port")
	bind := fs.String("bind-address", "0.0.0.0", "the API server's listen address")
	advertise := fs.String("advertise-address", "", "the address the API server advertises (default: --node-ip)")
	kubeconfigPath := fs.String("write-kubeconfig", k3sKubeconfig, "where the admin kubeconfig goes")
	kubeconfigMode := fs.String("write-kubeconfig-mode", "0600", "its file mode")
	// Accepted and ignored: k3s features this stand-in has nothing for.
	var ignored stringList
	for _, name := range []string{"disable", "flannel-backend", "node-taint", "node-label", "kube-apiserver-arg", "cluster-init", "selinux"} {
		fs.Var(&ignored, name, "accepted for compatibility with k3s; ignored by the stand-in")
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := node.complete(); err != nil {
		logf("%v", err)
		return 1
	}
	if *advertise == "" {
		*advertise = node.nodeIP
	}
	serverDir := filepath.Join(node.dataDir, "server")
	if err := os.MkdirAll(serverDir, 0o700); err != nil {
		logf("%v", err)
		return 1
	}
	// The token: given, or the one a previous start made, or a new one.
	tokenFile := filepath.Join(serverDir, "token")
	if node.token == "" {
		if data, err := os.ReadFile(tokenFile); err == nil {
			node.token = strings.TrimSpace(string(data))
		} else {
			node.token = hex.EncodeToString(serialNumber().Bytes())
		}
	}
	token, err := parseJoinToken(node.token)
	if err != nil {
		logf("%v", err)
		return 1
	}

	cp, err := newControlPlane(controlPlaneOptions{
		dataDir: serverDir, bindAddress: *bind, advertiseAddress: *advertise, port: *port,
		sans: append(sans, node.nodeIP, node.nodeName), kubeconfigOut: filepath.Join(serverDir, "cred", "admin.kubeconfig"),
		extraAPIServerArgs: []string{"--enable-bootstrap-token-auth=true"},
		logf:               logf,
	})
	if err == nil {
		err = os.MkdirAll(filepath.Join(serverDir, "cred"), 0o700)
	}
	if err != nil {
		logf("%v", err)
		return 1
	}
	ctx := context.Background()
	if err := cp.start(ctx); err != nil {
		logf("%v", err)
		cp.stop()
		return 1
	}
	fail := func(err error) int {
		logf("%v", err)
		cp.stop()
		return 1
	}
	admin, err := clientFor(kubeconfig(cp.localURL, cp.ca.certPEM, cp.admin, ""))
	if err != nil {
		return fail(err)
	}
	if err := prepareJoining(ctx, admin, token, kubeconfig(cp.server, cp.ca.certPEM, nil, "")); err != nil {
		return fail(fmt.Errorf("preparing for nodes to join: %w", err))
	}
	hash, err := caHash(cp.ca.certPEM)
	if err != nil {
		return fail(err)
	}
	nodeToken := fmt.Sprintf("K10%s::server:%s\n", hash, token.secret)
	for _, path := range []string{tokenFile, filepath.Join(serverDir, "node-token")} {
		if err := os.WriteFile(path, []byte(nodeToken), 0o600); err != nil {
			return fail(err)
		}
	}
	mode, err := strconv.ParseUint(*kubeconfigMode, 8, 32)
	if err != nil {
		return fail(fmt.Errorf("--write-kubeconfig-mode %q: %w", *kubeconfigMode, err))
	}
	local := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(cp.port))
	if err := os.MkdirAll(filepath.Dir(*kubeconfigPath), 0o755); err != nil {
		return fail(err)
	}
	if err := os.WriteFile(*kubeconfigPath, kubeconfig(local, cp.ca.certPEM, cp.admin, ""), os.FileMode(mode)); err != nil {
		return fail(err)
	}
	_ = os.Chmod(*kubeconfigPath, os.FileMode(mode))
	logf("wrote %s and %s", *kubeconfigPath, filepath.Join(serverDir, "node-token"))

	// This machine is a node too, joined the way agents join (as k3s's embedded agent does);
	// the roles are labels a node may not set on itself, so the server sets them.
	if err := joinAsNode(ctx, cp.supervisor, node, local, token, cp.ca.certPEM); err != nil {
		return fail(err)
	}
	roles := []byte(`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":"true","node-role.kubernetes.io/master":"true"}}}`)
	if _, err := admin.CoreV1().Nodes().Patch(ctx, node.nodeName, types.MergePatchType, roles, metav1.PatchOptions{FieldManager: "k3s-standin"}); err != nil {
		return fail(fmt.Errorf("labelling node %s: %w", node.nodeName, err))
	}
	go runServiceLB(ctx, admin, logf)
	logf("k3s stand-in server is up: node %s (%s), API server %s", node.nodeName, node.nodeIP, cp.server)
	return cp.serve(false)
}

// prepareJoining creates what joining nodes use: the bootstrap token (a Secret the API server's
// bootstrap authenticator and the controller manager's bootstrap signer read), the cluster-info
// ConfigMap (the CA, readable with the token), and the RBAC bindings of TLS bootstrapping.
func prepareJoining(ctx context.Context, admin kubernetes.Interface, token joinToken, clusterInfo []byte) error {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + token.tokenID, Namespace: metav1.NamespaceSystem},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"description":                    "k3s stand-in join token",
			"token-id":                       token.tokenID,
			"token-secret":                   token.tokenPass,
			"usage-bootstrap-authentication": "true",
			"usage-bootstrap-signing":        "true",
			"auth-extra-groups":              bootstrapGroup,
		},
	}
	clusterInfoMap := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-info", Namespace: metav1.NamespacePublic},
		Data:       map[string]string{"kubeconfig": string(clusterInfo)},
	}
	group := []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: bootstrapGroup}}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "k3s-standin:cluster-info", Namespace: metav1.NamespacePublic},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"cluster-info"}, Verbs: []string{"get"}}},
	}
	roleBinding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "k3s-standin:cluster-info", Namespace: metav1.NamespacePublic},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   group,
	}
	// kwok, the stand-in's kubelet, reads through informers: every node, pod and node lease,
	// where a kubelet reads its own (the Node authorizer allows a node only those since 1.32).
	// So nodes may read all of them; every write stays with the Node authorizer and NodeRestriction.
	kwokReader := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "k3s-standin:kwok-node-reader"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes", "pods"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch"}},
		},
	}
	nodes := []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:nodes"}}
	bindings := []*rbacv1.ClusterRoleBinding{
		{ObjectMeta: metav1.ObjectMeta{Name: kwokReader.Name}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: kwokReader.Name}, Subjects: nodes},
		// kube-proxy runs with its node's credentials (k3s gives it a system:kube-proxy certificate).
		{ObjectMeta: metav1.ObjectMeta{Name: "k3s-standin:node-proxier"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-proxier"}, Subjects: nodes},
		// Bootstrapping nodes may file CSRs, and their node-client CSRs are approved automatically.
		{ObjectMeta: metav1.ObjectMeta{Name: "k3s-standin:node-bootstrapper"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-bootstrapper"}, Subjects: group},
		{ObjectMeta: metav1.ObjectMeta{Name: "k3s-standin:node-autoapprove"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:certificates.k8s.io:certificatesigningrequests:nodeclient"}, Subjects: group},
	}
	ignoreExists := func(err error) error {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if _, err := admin.CoreV1().Secrets(secret.Namespace).Create(ctx, secret, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return err
	}
	if _, err := admin.CoreV1().ConfigMaps(clusterInfoMap.Namespace).Create(ctx, clusterInfoMap, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = admin.CoreV1().ConfigMaps(clusterInfoMap.Namespace).Update(ctx, clusterInfoMap, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if _, err := admin.RbacV1().Roles(role.Namespace).Create(ctx, role, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return err
	}
	if _, err := admin.RbacV1().RoleBindings(roleBinding.Namespace).Create(ctx, roleBinding, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return err
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, kwokReader, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return err
	}
	for _, binding := range bindings {
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); ignoreExists(err) != nil {
			return err
		}
	}
	return nil
}

func k3sAgent(args []string) int {
	logf := stderrLogger("k3s-standin agent")
	fs := flag.NewFlagSet("k3s agent", flag.ContinueOnError)
	var node nodeOptions
	node.register(fs)
	server := fs.String("server", "", "the server's URL, https://HOST:6443 (required)")
	var ignored stringList
	for _, name := range []string{"node-taint", "node-label", "selinux"} {
		fs.Var(&ignored, name, "accepted for compatibility with k3s; ignored by the stand-in")
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *server == "" || node.token == "" {
		logf("--server and --token (or K3S_TOKEN) are required")
		return 2
	}
	if err := node.complete(); err != nil {
		logf("%v", err)
		return 1
	}
	token, err := parseJoinToken(node.token)
	if err != nil {
		logf("%v", err)
		return 1
	}
	ctx := context.Background()
	caPEM, err := fetchClusterCA(ctx, *server, token)
	if err != nil {
		logf("%v", err)
		return 1
	}
	sup, err := newSupervisor(filepath.Join(node.dataDir, "agent"), logf)
	if err != nil {
		logf("%v", err)
		return 1
	}
	if err := joinAsNode(ctx, sup, node, *server, token, caPEM); err != nil {
		logf("%v", err)
		sup.stop()
		return 1
	}
	logf("k3s stand-in agent is up: node %s (%s) joined %s", node.nodeName, node.nodeIP, *server)
	return sup.serve(false)
}

// fetchClusterCA reads the CA from the cluster-info ConfigMap with the bootstrap token — over a
// connection that cannot verify the server yet — and checks it against the token's hash (as
// k3s agents and kubeadm join do). A bare secret (no hash) trusts what it gets, like k3s.
func fetchClusterCA(ctx context.Context, server string, token joinToken) ([]byte, error) {
	config, err := clientcmd.RESTConfigFromKubeConfig(kubeconfigUnverified(server, token.bootstrapToken()))
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	var info *corev1.ConfigMap
	err = retry(ctx, 2*time.Minute, func() error { // the server may still be starting
		info, err = client.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, "cluster-info", metav1.GetOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the cluster's CA from %s with the token: %w", server, err)
	}
	parsed, err := clientcmd.Load([]byte(info.Data["kubeconfig"]))
	if err != nil {
		return nil, fmt.Errorf("cluster-info: %w", err)
	}
	var caPEM []byte
	for _, cluster := range parsed.Clusters {
		caPEM = cluster.CertificateAuthorityData
	}
	if len(caPEM) == 0 {
		return nil, errors.New("cluster-info has no CA")
	}
	if token.caHash != "" {
		hash, err := caHash(caPEM)
		if err != nil {
			return nil, err
		}
		if hash != token.caHash {
			return nil, fmt.Errorf("the server's CA (sha256 %s) is not the one the token names (%s): wrong server or token", hash, token.caHash)
		}
	}
	return caPEM, nil
}

// retry calls try every 2 s until it succeeds, the time is up, or — after the first 20 s, which
// a new token may need to reach the API server's authenticator — the server refuses the token.
func retry(ctx context.Context, limit time.Duration, try func() error) error {
	started := time.Now()
	for {
		err := try()
		if err == nil || time.Since(started) > limit || (apierrors.IsUnauthorized(err) && time.Since(started) > 20*time.Second) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

func kubeconfigUnverified(server, token string) []byte {
	return []byte(fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: %s\n    insecure-skip-tls-verify: true\n  name: default\ncontexts:\n- context:\n    cluster: default\n    user: default\n  name: default\ncurrent-context: default\nusers:\n- name: default\n  user:\n    token: %s\n", server, token))
}

func clientFor(kubeconfigData []byte) (kubernetes.Interface, error) {
	config, err := clientcmd.RESTConfigFromKubeConfig(kubeconfigData)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(config)
}

// joinAsNode gets this machine's node credentials (kept in <data-dir>/agent), creates its Node
// object and runs kwok as its kubelet, under sup.
func joinAsNode(ctx context.Context, sup *supervisor, node nodeOptions, server string, token joinToken, caPEM []byte) error {
	agentDir := filepath.Join(node.dataDir, "agent")
	if err := os.MkdirAll(agentDir, 0o700); err != nil {
		return err
	}
	kubeconfigPath := filepath.Join(agentDir, "kubelet.kubeconfig")
	creds, err := nodeCredentials(ctx, server, token, caPEM, node.nodeName)
	if err != nil {
		return fmt.Errorf("node credentials for %s: %w", node.nodeName, err)
	}
	data := kubeconfig(server, caPEM, creds, "")
	if err := os.WriteFile(kubeconfigPath, data, 0o600); err != nil {
		return err
	}
	client, err := clientFor(data)
	if err != nil {
		return err
	}
	if kubeletMode() == "real" {
		// The upstream kubelet registers the Node itself.
		return startRealNode(ctx, sup, node, kubeconfigPath, caPEM, client)
	}
	if err := registerNode(ctx, client, node); err != nil {
		return fmt.Errorf("registering node %s: %w", node.nodeName, err)
	}
	if err := writeStandinPodLog(agentDir); err != nil {
		return err
	}
	return sup.startKwok(ctx, agentDir, kubeconfigPath, "--manage-single-node="+node.nodeName, node.nodeIP)
}

// writeStandinPodLog gives the node's pods a log that says what they are (kwok serves the file as
// every container's log): no container runs here.
func writeStandinPodLog(agentDir string) error {
	line := fmt.Sprintf("%s stdout F %s: no container runs on this node; this line is every pod's log\n", time.Now().UTC().Format(time.RFC3339Nano), standinNote)
	return os.WriteFile(filepath.Join(agentDir, PodLogsFile), []byte(line), 0o644)
}

// nodeCredentials is TLS bootstrapping: a key, a CSR for system:node:<name> in system:nodes filed
// with the bootstrap token, approved by the controller manager's CSR approver and signed by its
// signer.
func nodeCredentials(ctx context.Context, server string, token joinToken, caPEM []byte, nodeName string) (*keyPair, error) {
	bootstrap, err := clientFor(kubeconfig(server, caPEM, nil, token.bootstrapToken()))
	if err != nil {
		return nil, err
	}
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	request, err := x509.CreateCertificateRequest(nil, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		return nil, err
	}
	requestPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: request})
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	var name string
	var uid types.UID
	err = retry(ctx, time.Minute, func() error { // the token's Secret reaches the authenticator's cache within seconds
		name, uid, err = csr.RequestCertificateWithContext(ctx, bootstrap, requestPEM, "", certificatesv1.KubeAPIServerClientKubeletSignerName, nil, usages, key)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("filing the certificate signing request: %w", err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	certPEM, err := csr.WaitForCertificate(waitCtx, bootstrap, name, uid)
	if err != nil {
		return nil, fmt.Errorf("waiting for certificate signing request %s to be approved and signed: %w", name, err)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, err
	}
	return &keyPair{certPEM: certPEM, keyPEM: keyPEM}, nil
}

// registerNode creates the node's Node object with its own credentials, as a kubelet does, marked
// as managed by kwok (the stand-in's kubelet) and with the addresses and version it reports.
func registerNode(ctx context.Context, client kubernetes.Interface, node nodeOptions) error {
	object := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: node.nodeName,
			Labels: map[string]string{
				"kubernetes.io/hostname": node.nodeName, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"node.kubernetes.io/instance-type": "k3s",
			},
			Annotations: map[string]string{kwokNodeAnnotation: "fake", "hangar.dev/k3s-standin": "true"},
		},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: node.nodeIP}, {Type: corev1.NodeHostName, Address: node.nodeName}},
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion:          version.Get().GitVersion + "+k3s-standin",
				ContainerRuntimeVersion: "kwok://v" + kwokconsts.Version,
				OperatingSystem:         "linux", Architecture: "amd64",
				OSImage: "hangar k3s stand-in",
			},
		},
	}
	_, err := client.CoreV1().Nodes().Create(ctx, object, metav1.CreateOptions{FieldManager: "k3s-standin"})
	if apierrors.IsAlreadyExists(err) {
		return nil // a restarted agent: kwok takes the existing node over
	}
	return err
}
