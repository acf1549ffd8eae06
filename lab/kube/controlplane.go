package main

// `kube control-plane`: starts the real upstream control plane — etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler — and kwok (which plays the kubelet of every node
// annotated kwok.x-k8s.io/node=fake: nodes report Ready, pods bound to them go Running, no
// container runs), each as a child process of this executable, with generated certificates.
// It prints one JSON line {"ready":true,...} on stdout once the API server answers /readyz and
// stays in the foreground until SIGTERM/SIGINT (or, with --exit-on-stdin-close, until its stdin
// closes: the test harness's lifeline), then stops the children, newest first. A child that
// dies takes the whole control plane down with it (exit code 1, the end of its log on stderr).
// Children get SIGKILL if this process is killed (Pdeathsig), so nothing outlives it.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// k3s's defaults.
	clusterCIDR = "10.42.0.0/16"
	serviceCIDR = "10.43.0.0/16"
	serviceIP   = "10.43.0.1"
	// Nodes kwok manages carry this annotation.
	kwokNodeAnnotation = "kwok.x-k8s.io/node"
)

type controlPlaneOptions struct {
	dataDir          string
	bindAddress      string   // where the API server listens
	advertiseAddress string   // the address the API server advertises (the kubernetes Service's endpoint)
	port             int      // the API server's port; 0 picks a free one
	sans             []string // more names or addresses in the serving certificate
	kubeconfigOut    string   // where the admin kubeconfig goes (default <data-dir>/admin.kubeconfig)
	// kwokSelector: which nodes this control plane's kwok manages (an annotation selector); empty: none (no kwok).
	kwokSelector string
	// extraAPIServerArgs: more kube-apiserver flags (the k3s stand-in's bootstrap tokens).
	extraAPIServerArgs []string
	logf               func(format string, args ...any)
}

type component struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	err     error // set before exited closes
}

// supervisor runs components (this executable under another name) as children, each logging to
// <data-dir>/logs/<name>.log, and stops them all when one dies or it is told to.
type supervisor struct {
	dataDir    string
	logf       func(format string, args ...any)
	components []*component
	mu         sync.Mutex
	stopping   bool
	died       chan *component
	// cleanups run after every component has stopped, the last added first (a real node's
	// containers, mounts, interfaces and firewall rules: node.go).
	cleanups []func()
}

// onStop adds a cleanup that runs once the components have stopped.
func (s *supervisor) onStop(cleanup func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, cleanup)
}

func newSupervisor(dataDir string, logf func(format string, args ...any)) (*supervisor, error) {
	if err := os.MkdirAll(filepath.Join(dataDir, "logs"), 0o700); err != nil {
		return nil, err
	}
	return &supervisor{dataDir: dataDir, logf: logf, died: make(chan *component, 8)}, nil
}

type controlPlane struct {
	*supervisor
	opts     controlPlaneOptions
	pki      string
	ca       *keyPair
	admin    *keyPair
	server   string // https://<advertise or loopback>:<port> for the kubeconfigs
	localURL string // https://127.0.0.1:<port>, for this process's probes
	port     int
}

// freePort asks the kernel for a free TCP port on host (a later bind may still lose a race:
// startComponent retries with new ports when a child reports the address in use).
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func newControlPlane(opts controlPlaneOptions) (*controlPlane, error) {
	if opts.bindAddress == "" {
		opts.bindAddress = "127.0.0.1"
	}
	if opts.advertiseAddress == "" {
		opts.advertiseAddress = opts.bindAddress
		if ip := net.ParseIP(opts.bindAddress); ip == nil || ip.IsUnspecified() {
			opts.advertiseAddress = "127.0.0.1"
		}
	}
	if opts.kubeconfigOut == "" {
		opts.kubeconfigOut = filepath.Join(opts.dataDir, "admin.kubeconfig")
	}
	sup, err := newSupervisor(opts.dataDir, opts.logf)
	if err != nil {
		return nil, err
	}
	cp := &controlPlane{supervisor: sup, opts: opts, pki: filepath.Join(opts.dataDir, "pki")}
	for _, dir := range []string{cp.pki, filepath.Join(opts.dataDir, "etcd")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
	}
	return cp, nil
}

// certificates makes (or, for the CA and the service-account key, reuses) everything the
// components and the admin need.
func (cp *controlPlane) certificates() error {
	ca, err := loadOrCreateCA(cp.pki, "hangar-kube-ca")
	if err != nil {
		return err
	}
	cp.ca = ca
	if err := writeServiceAccountKey(cp.pki); err != nil {
		return err
	}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(serviceIP), net.ParseIP(cp.opts.advertiseAddress)}
	dns := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	for _, san := range cp.opts.sans {
		if ip := net.ParseIP(san); ip != nil {
			ips = append(ips, ip)
		} else if san != "" {
			dns = append(dns, san)
		}
	}
	if host, err := os.Hostname(); err == nil {
		dns = append(dns, host)
	}
	serving, err := ca.issue(certRequest{commonName: "kube-apiserver", dnsNames: dns, ips: ips, server: true})
	if err != nil {
		return err
	}
	if err := serving.write(cp.pki, "apiserver"); err != nil {
		return err
	}
	// The API server's client certificate towards kubelets (here: kwok's server, for logs).
	kubeletClient, err := ca.issue(certRequest{commonName: "kube-apiserver-kubelet-client", organizations: []string{"system:masters"}})
	if err != nil {
		return err
	}
	if err := kubeletClient.write(cp.pki, "apiserver-kubelet-client"); err != nil {
		return err
	}
	cp.admin, err = ca.issue(certRequest{commonName: "system:admin", organizations: []string{"system:masters"}})
	return err
}

// writeKubeconfig writes a kubeconfig for a client certificate of the cluster CA.
func (cp *controlPlane) writeKubeconfig(path, commonName string, organizations []string) error {
	client := cp.admin
	if commonName != "" {
		var err error
		if client, err = cp.ca.issue(certRequest{commonName: commonName, organizations: organizations}); err != nil {
			return err
		}
	}
	return os.WriteFile(path, kubeconfig(cp.server, cp.ca.certPEM, client, ""), 0o600)
}

func (cp *controlPlane) start(ctx context.Context) error {
	if err := cp.certificates(); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	pki := func(name string) string { return filepath.Join(cp.pki, name) }

	var etcdURL string
	err := cp.startComponent(ctx, "etcd", func() ([]string, error) {
		client, err := freePort("127.0.0.1")
		if err != nil {
			return nil, err
		}
		peer, err := freePort("127.0.0.1")
		if err != nil {
			return nil, err
		}
		etcdURL = fmt.Sprintf("http://127.0.0.1:%d", client)
		peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
		return []string{
			"--name=default",
			"--data-dir=" + filepath.Join(cp.opts.dataDir, "etcd"),
			"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
			"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=default=" + peerURL,
			"--listen-metrics-urls=", "--log-level=warn",
			// A test cluster: losing the last writes on a power cut is acceptable, fsync on a shared disk is slow.
			"--unsafe-no-fsync",
		}, nil
	}, func() error { return probe(ctx, plainClient, etcdURL+"/health", `"health":"true"`) })
	if err != nil {
		return err
	}

	err = cp.startComponent(ctx, "kube-apiserver", func() ([]string, error) {
		port := cp.opts.port
		if port == 0 {
			var err error
			if port, err = freePort(cp.opts.bindAddress); err != nil {
				return nil, err
			}
		}
		cp.port = port
		cp.server = "https://" + net.JoinHostPort(cp.opts.advertiseAddress, strconv.Itoa(port))
		cp.localURL = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		return append([]string{
			"--etcd-servers=" + etcdURL,
			"--bind-address=" + cp.opts.bindAddress,
			"--secure-port=" + strconv.Itoa(port),
			"--advertise-address=" + cp.opts.advertiseAddress,
			"--tls-cert-file=" + pki("apiserver.crt"), "--tls-private-key-file=" + pki("apiserver.key"),
			"--client-ca-file=" + pki("ca.crt"),
			"--kubelet-client-certificate=" + pki("apiserver-kubelet-client.crt"),
			"--kubelet-client-key=" + pki("apiserver-kubelet-client.key"),
			// As k3s does: a node's address first (its name need not resolve: hangar names nodes by its ids).
			"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + pki("sa.pub"),
			"--service-account-signing-key-file=" + pki("sa.key"),
			"--api-audiences=https://kubernetes.default.svc.cluster.local",
			"--service-cluster-ip-range=" + serviceCIDR,
			"--authorization-mode=Node,RBAC",
			"--enable-admission-plugins=NodeRestriction",
			"--allow-privileged=true",
			"--profiling=false",
		}, cp.opts.extraAPIServerArgs...), nil
	}, func() error {
		client, err := cp.adminClient()
		if err != nil {
			return err
		}
		return probe(ctx, client, cp.localURL+"/readyz", "ok")
	})
	if err != nil {
		return err
	}

	for _, name := range []string{"kube-controller-manager", "kube-scheduler", "kwok", "admin"} {
		var commonName string
		var orgs []string
		switch name {
		case "kube-controller-manager", "kube-scheduler":
			commonName = "system:" + name
		case "kwok":
			commonName, orgs = "kwok", []string{"system:masters"}
		}
		path := filepath.Join(cp.opts.dataDir, name+".kubeconfig")
		if name == "admin" {
			path = cp.opts.kubeconfigOut
		}
		if err := cp.writeKubeconfig(path, commonName, orgs); err != nil {
			return err
		}
	}
	componentConfig := func(name string) []string {
		path := filepath.Join(cp.opts.dataDir, name+".kubeconfig")
		return []string{"--kubeconfig=" + path, "--authentication-kubeconfig=" + path, "--authorization-kubeconfig=" + path}
	}
	var healthURL string
	healthy := func() error { return probe(ctx, insecureClient, healthURL, "ok") }
	err = cp.startComponent(ctx, "kube-controller-manager", func() ([]string, error) {
		port, err := freePort("127.0.0.1")
		healthURL = fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
		return append(componentConfig("kube-controller-manager"),
			"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
			"--leader-elect=false",
			"--use-service-account-credentials=true",
			"--controllers=*,bootstrapsigner,tokencleaner",
			"--service-account-private-key-file="+pki("sa.key"),
			"--root-ca-file="+pki("ca.crt"),
			"--cluster-signing-cert-file="+pki("ca.crt"), "--cluster-signing-key-file="+pki("ca.key"),
			"--allocate-node-cidrs=true", "--cluster-cidr="+clusterCIDR, "--service-cluster-ip-range="+serviceCIDR,
			"--profiling=false",
		), err
	}, healthy)
	if err != nil {
		return err
	}
	err = cp.startComponent(ctx, "kube-scheduler", func() ([]string, error) {
		port, err := freePort("127.0.0.1")
		healthURL = fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
		return append(componentConfig("kube-scheduler"),
			"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
			"--leader-elect=false", "--profiling=false",
		), err
	}, healthy)
	if err != nil {
		return err
	}
	if cp.opts.kwokSelector == "" {
		return nil
	}
	return cp.startKwok(ctx, cp.pki, filepath.Join(cp.opts.dataDir, "kwok.kubeconfig"), "--manage-nodes-with-annotation-selector="+cp.opts.kwokSelector, "")
}

// startKwok runs kwok with a kubeconfig: it plays the kubelet of the nodes it manages, and serves
// their kubelet API (HTTPS, a certificate of its own: the API server does not verify kubelets
// here) on a free port of nodeIP (loopback when empty).
func (s *supervisor) startKwok(ctx context.Context, pkiDir, kubeconfigPath, manage, nodeIP string) error {
	host := nodeIP
	if host == "" {
		host = "127.0.0.1"
	}
	logsConfig, err := writeKwokLogsConfig(filepath.Dir(kubeconfigPath))
	if err != nil {
		return err
	}
	issuer, err := newCA("kwok-serving-ca")
	if err != nil {
		return err
	}
	serving, err := issuer.issue(certRequest{commonName: "kwok", ips: []net.IP{net.ParseIP(host)}, server: true})
	if err != nil {
		return err
	}
	if err := serving.write(pkiDir, "kwok-serving"); err != nil {
		return err
	}
	var healthURL string
	return s.startComponent(ctx, "kwok", func() ([]string, error) {
		port, err := freePort(host)
		address := net.JoinHostPort(host, strconv.Itoa(port))
		healthURL = "https://" + address + "/healthz"
		return []string{
			"--kubeconfig=" + kubeconfigPath,
			"--manage-all-nodes=false", manage,
			"--cidr=" + clusterCIDR,
			"--node-ip=" + host,
			"--node-lease-duration-seconds=40",
			"--server-address=" + address,
			"--node-port=" + strconv.Itoa(port),
			"--tls-cert-file=" + filepath.Join(pkiDir, "kwok-serving.crt"),
			"--tls-private-key-file=" + filepath.Join(pkiDir, "kwok-serving.key"),
			"--config=" + logsConfig,
		}, err
	}, func() error { return probe(ctx, insecureClient, healthURL, "") })
}

// PodLogsFile is, in the folder of a kwok's kubeconfig, the file kwok serves as the log of
// every container of the pods it runs (a CRI log: "<RFC 3339 time> stdout F <line>" per line).
// No container runs, so nothing writes to it but whoever wants a pod to have logs (the tests; the
// k3s stand-in writes a line saying what it is): the API server's pod-log proxy reaches kwok's
// kubelet API, and kwok answers with the kubelet's own log reader (tail, since, timestamps).
const PodLogsFile = "pod-logs.log"

// writeKwokLogsConfig writes kwok's configuration: one ClusterLogs rule giving every container of
// every pod the lines of dir/PodLogsFile (created empty when missing). Kwok's default node and pod
// stages stay (the configuration has no Stage).
func writeKwokLogsConfig(dir string) (string, error) {
	logs := filepath.Join(dir, PodLogsFile)
	file, err := os.OpenFile(logs, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return "", err
	}
	file.Close()
	config := filepath.Join(dir, "kwok.yaml")
	content := fmt.Sprintf("kind: ClusterLogs\napiVersion: kwok.x-k8s.io/v1alpha1\nmetadata:\n  name: every-container\nspec:\n  logs:\n  - logsFile: %q\n    follow: false\n", logs)
	return config, os.WriteFile(config, []byte(content), 0o600)
}

// startComponent runs this executable as `name` with the arguments args() returns, then waits
// until ready() succeeds. When the child exits before that because its address was taken (a
// free port is only free until someone binds it), it tries again with new arguments.
func (s *supervisor) startComponent(ctx context.Context, name string, args func() ([]string, error), ready func() error) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	return s.startProgram(ctx, name, self, args, ready)
}

// startProgram is startComponent for any executable (containerd is not part of this one): path
// runs with argv[0] = name.
func (s *supervisor) startProgram(ctx context.Context, name, path string, args func() ([]string, error), ready func() error) error {
	logPath := filepath.Join(s.dataDir, "logs", name+".log")
	for attempt := 1; ; attempt++ {
		argv, err := args()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		c := &component{name: name, logPath: logPath, exited: make(chan struct{})}
		c.cmd = &exec.Cmd{
			Path:        path,
			Args:        append([]string{name}, argv...),
			Stdout:      logFile,
			Stderr:      logFile,
			SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
		}
		started := time.Now()
		if err := c.cmd.Start(); err != nil {
			logFile.Close()
			return fmt.Errorf("%s: %w", name, err)
		}
		logFile.Close()
		s.mu.Lock()
		s.components = append(s.components, c)
		s.mu.Unlock()
		go func() {
			c.err = c.cmd.Wait()
			close(c.exited)
			s.mu.Lock()
			stopping := s.stopping
			s.mu.Unlock()
			if !stopping {
				s.died <- c
			}
		}()
		err = waitReady(ctx, c, ready)
		if err == nil {
			s.logf("%s is ready (pid %d, %.1f s)", name, c.cmd.Process.Pid, time.Since(started).Seconds())
			return nil
		}
		select {
		case <-c.exited:
			<-s.died // expected: handled here
			s.forget(c)
			if attempt < 3 && strings.Contains(tailOf(logPath, 4000), "address already in use") {
				s.logf("%s lost a port race; trying other ports", name)
				continue
			}
		default:
		}
		return fmt.Errorf("%s did not become ready: %w\n--- the end of %s ---\n%s", name, err, logPath, tailOf(logPath, 3000))
	}
}

func (s *supervisor) forget(c *component) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, other := range s.components {
		if other == c {
			s.components = append(s.components[:i], s.components[i+1:]...)
			return
		}
	}
}

// waitReady polls ready() for up to two minutes (a loaded machine starts the API server slowly),
// giving up at once when the child exits.
func waitReady(ctx context.Context, c *component, ready func() error) error {
	deadline := time.Now().Add(2 * time.Minute)
	var last error
	for time.Now().Before(deadline) {
		if last = ready(); last == nil {
			return nil
		}
		select {
		case <-c.exited:
			return fmt.Errorf("it exited (%v)", c.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("not ready after 2 minutes: %w", last)
}

var (
	plainClient    = &http.Client{Timeout: 5 * time.Second}
	insecureClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // #nosec: loopback health probes of self-signed component ports
)

func (cp *controlPlane) adminClient() (*http.Client, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.ca.certPEM)
	cert, err := tls.X509KeyPair(cp.admin.certPEM, cp.admin.keyPEM)
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}, nil
}

// probe succeeds when url answers 200 with a body containing want.
func probe(ctx context.Context, client *http.Client, url, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		return fmt.Errorf("%s answered %d %s", url, res.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

func tailOf(path string, max int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if info, err := f.Stat(); err == nil && info.Size() > max {
		_, _ = f.Seek(info.Size()-max, io.SeekStart)
	}
	data, _ := io.ReadAll(f)
	return string(data)
}

// stop sends SIGTERM to the components, newest first, each given 10 s before SIGKILL.
func (s *supervisor) stop() {
	s.mu.Lock()
	s.stopping = true
	components := append([]*component(nil), s.components...)
	s.mu.Unlock()
	for i := len(components) - 1; i >= 0; i-- {
		c := components[i]
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	}
	s.mu.Lock()
	cleanups := s.cleanups
	s.cleanups = nil
	s.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
}

// serve blocks until a signal, stdin closing (when asked) or a component dying; stops everything.
func (s *supervisor) serve(exitOnStdinClose bool) int {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	stdinClosed := make(chan struct{})
	if exitOnStdinClose {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			close(stdinClosed)
		}()
	}
	code := 0
	select {
	case sig := <-signals:
		s.logf("%s: stopping", sig)
	case <-stdinClosed:
		s.logf("stdin closed (the process that started it is gone): stopping")
	case c := <-s.died:
		s.logf("%s exited (%v): stopping everything\n--- the end of %s ---\n%s", c.name, c.err, c.logPath, tailOf(c.logPath, 3000))
		code = 1
	}
	s.stop()
	return code
}

// stderrLogger prints one line per call, prefixed with the command's name.
func stderrLogger(prefix string) func(format string, args ...any) {
	return func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, prefix+": "+format+"\n", args...)
	}
}

type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*s = append(*s, part)
		}
	}
	return nil
}

func runControlPlane() int {
	fs := flag.NewFlagSet("control-plane", flag.ContinueOnError)
	var opts controlPlaneOptions
	var sans stringList
	fs.StringVar(&opts.dataDir, "data-dir", "", "where certificates, kubeconfigs, logs and the etcd data go (required)")
	fs.StringVar(&opts.bindAddress, "bind-address", "127.0.0.1", "the API server's listen address")
	fs.StringVar(&opts.advertiseAddress, "advertise-address", "", "the API server's advertised address (default: the bind address, or 127.0.0.1)")
	fs.IntVar(&opts.port, "port", 0, "the API server's port (0: a free one)")
	fs.Var(&sans, "tls-san", "more names or addresses for the serving certificate (repeatable, comma-separated)")
	fs.StringVar(&opts.kubeconfigOut, "kubeconfig", "", "where to write the admin kubeconfig (default <data-dir>/admin.kubeconfig)")
	fs.StringVar(&opts.kwokSelector, "kwok-nodes", kwokNodeAnnotation+"=fake", "kwok manages the nodes with this annotation (empty: no kwok)")
	exitOnStdinClose := fs.Bool("exit-on-stdin-close", false, "stop when stdin closes (for a parent process that may die without cleaning up)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if opts.dataDir == "" {
		fmt.Fprintln(os.Stderr, "control-plane: --data-dir is required")
		return 2
	}
	opts.sans = sans
	opts.logf = stderrLogger("control-plane")
	cp, err := newControlPlane(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "control-plane: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := time.Now()
	if err := cp.start(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "control-plane: %v\n", err)
		cp.stop()
		return 1
	}
	pids := map[string]int{}
	for _, c := range cp.components {
		pids[c.name] = c.cmd.Process.Pid
	}
	ready, _ := json.Marshal(map[string]any{
		"ready": true, "server": cp.server, "kubeconfig": cp.opts.kubeconfigOut, "pids": pids,
		"seconds": time.Since(started).Seconds(),
	})
	w := bufio.NewWriter(os.Stdout)
	_, _ = w.Write(append(ready, '\n'))
	_ = w.Flush()
	return cp.serve(*exitOnStdinClose)
}
