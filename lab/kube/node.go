package main

// A REAL node of the k3s stand-in: Debian's containerd (with its CRI plugin) and runc, the
// upstream kubelet and kube-proxy (commands of this executable), the CNI plugins of Debian's
// containernetworking-plugins and a VXLAN pod network between the nodes (podnet.go). It is what
// `k3s server` and `k3s agent` run on their machine unless K3S_STANDIN_KUBELET=kwok (kwok then
// plays the kubelet, as before: no container runs).
//
// Made for the machine lab, whose machines are containers (docs/lab.md): the kubelet needs a few
// things a container does not give it, and the stand-in arranges them in the machine's own mount
// namespace, never on the host:
//   - the kubelet's global sysctls (vm.overcommit_memory=1, kernel.panic=10, kernel.panic_on_oops=1
//     and the rest it checks): where the kernel's value differs, a file holding the value the
//     kubelet wants is bind-mounted over /proc/sys/<name> (the host's value is never written:
//     /proc/sys stays read-only);
//   - /proc/sys/net writable (bind-mounted read-write over itself): kube-proxy and the CNI plugins
//     set network sysctls, which belong to the machine's own network namespace;
//   - containerd's root on a tmpfs when it would be on overlayfs (overlayfs cannot be the upper
//     layer of containerd's overlay snapshots), as the lab does for /var/lib/docker;
//   - the kubelet's cgroups under the machine's cgroup parent (LAB_CGROUP_PARENT, which the lab
//     removes at teardown) instead of the host's /kubepods, with the cgroupfs driver (no systemd);
//   - containerd's CRI with restrict_oom_score_adj (no CAP_SYS_RESOURCE: a container's score can
//     only be raised), and the kubelet's and kube-proxy's own oom_score_adj left at 0;
//   - /dev/kmsg (the kubelet's OOM watcher reads it): the lab passes the device.
// Nothing can be pulled: images are imported into containerd from <data-dir>/agent/images/*.tar
// at start, as k3s imports its airgap images (a `docker save` archive; the sandbox image named by
// --pause-image must be among them).
//
// When the stand-in stops (SIGTERM), it takes its node down with it, as k3s-killall.sh would:
// the pods' processes and containerd's shims are killed, the mounts under /var/lib/kubelet,
// /run/k3s and containerd's root are unmounted, the pod network's interfaces and the KUBE-/CNI-
// and stand-in firewall rules are removed, and so are the sysctl and /proc/sys/net mounts and the
// pods' cgroups. (Real k3s leaves its pods running when it stops; its killall script does this.)

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const (
	containerdState  = "/run/k3s/containerd"
	containerdSocket = containerdState + "/containerd.sock"
	kubeletRoot      = "/var/lib/kubelet"
	// DefaultPauseImage is the stand-in's sandbox image (k3s's --pause-image): made locally in
	// the lab (lab-k8s-images), imported with the other images.
	defaultPauseImage = "docker.io/lab/pause:3.10"
	kubeletHealthz    = "http://127.0.0.1:10248/healthz"
	kubeProxyHealthz  = "http://127.0.0.1:10256/healthz"
	overlayfsMagic    = 0x794c7630
)

// cniBinDirs: where Debian's containernetworking-plugins puts the plugins, then the usual place.
var cniBinDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

// realNode runs the node's containerd, kubelet and kube-proxy under sup.
type realNode struct {
	node           nodeOptions
	sup            *supervisor
	client         kubernetes.Interface // with the node's own credentials
	kubeconfigPath string
	caPEM          []byte
	agentDir       string
	cgroupRoot     string
	cniBinDir      string
	logf           func(format string, args ...any)
}

// argList is a repeatable flag of k3s's --kubelet-arg kind: name=value, given on as --name=value.
type argList []string

func (a *argList) String() string     { return strings.Join(*a, " ") }
func (a *argList) Set(v string) error { *a = append(*a, v); return nil }
func (a argList) flags() []string {
	flags := make([]string, 0, len(a))
	for _, arg := range a {
		flags = append(flags, "--"+strings.TrimLeft(arg, "-"))
	}
	return flags
}

// kubeletMode says whether this stand-in runs real nodes (the default) or kwok's simulated ones.
func kubeletMode() string {
	if os.Getenv("K3S_STANDIN_KUBELET") == "kwok" {
		return "kwok"
	}
	return "real"
}

// realNodePrerequisites names what a real node needs and this machine lacks.
func realNodePrerequisites() (cniBinDir string, err error) {
	var missing []string
	for _, program := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "iptables-save", "iptables-restore", "ip", "bridge"} {
		if _, err := exec.LookPath(program); err != nil {
			missing = append(missing, program)
		}
	}
	for _, dir := range cniBinDirs {
		if _, err := os.Stat(filepath.Join(dir, "bridge")); err == nil {
			cniBinDir = dir
			break
		}
	}
	if cniBinDir == "" {
		missing = append(missing, "the CNI plugins (bridge, host-local, portmap, loopback in "+strings.Join(cniBinDirs, " or ")+": Debian's containernetworking-plugins)")
	}
	if _, err := os.Stat("/dev/kmsg"); err != nil {
		missing = append(missing, "/dev/kmsg (a container needs --device /dev/kmsg)")
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("a real node needs %s (or set K3S_STANDIN_KUBELET=kwok for simulated nodes)", strings.Join(missing, ", "))
	}
	return cniBinDir, nil
}

// startRealNode brings the node up: machine preparation, containerd, images, kubelet (which
// registers the Node), the pod network once the Node has its pod CIDR, kube-proxy.
func startRealNode(ctx context.Context, sup *supervisor, node nodeOptions, kubeconfigPath string, caPEM []byte, client kubernetes.Interface) error {
	cniBinDir, err := realNodePrerequisites()
	if err != nil {
		return err
	}
	n := &realNode{
		node: node, sup: sup, client: client, kubeconfigPath: kubeconfigPath, caPEM: caPEM,
		agentDir: filepath.Join(node.dataDir, "agent"), cgroupRoot: cgroupRoot(), cniBinDir: cniBinDir, logf: sup.logf,
	}
	started := time.Now()
	// The cleanup goes first, so it runs last: after the network loop has stopped.
	sup.onStop(n.cleanup)
	if err := n.prepareMachine(); err != nil {
		return fmt.Errorf("preparing the machine for a kubelet: %w", err)
	}
	if err := n.startContainerd(ctx); err != nil {
		return err
	}
	if err := n.importImages(ctx); err != nil {
		return err
	}
	if err := n.startKubelet(ctx); err != nil {
		return err
	}
	podCIDR, err := n.waitForPodCIDR(ctx)
	if err != nil {
		return err
	}
	network, err := newPodNetwork(n, podCIDR)
	if err != nil {
		return fmt.Errorf("the pod network: %w", err)
	}
	if err := network.setUp(ctx); err != nil {
		return fmt.Errorf("the pod network: %w", err)
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	sup.onStop(cancel)
	go network.run(loopCtx)
	if err := n.startKubeProxy(ctx); err != nil {
		return err
	}
	n.logf("real node %s is up (containerd, kubelet, kube-proxy; pod CIDR %s) in %.1f s", node.nodeName, podCIDR, time.Since(started).Seconds())
	return nil
}

// cgroupRoot is where the kubelet's cgroups go: K3S_STANDIN_CGROUP_ROOT, else the lab machine's
// cgroup parent (LAB_CGROUP_PARENT in the environment docker gave the machine's init, which the
// lab removes at teardown: cgroups are the host's here), else the kubelet's default /.
func cgroupRoot() string {
	if root := os.Getenv("K3S_STANDIN_CGROUP_ROOT"); root != "" {
		return root
	}
	if environ, err := os.ReadFile("/proc/1/environ"); err == nil {
		for _, entry := range strings.Split(string(environ), "\x00") {
			if value, ok := strings.CutPrefix(entry, "LAB_CGROUP_PARENT="); ok && strings.HasPrefix(value, "/") {
				return value
			}
		}
	}
	return "/"
}

// kubeletSysctls are the global sysctls the kubelet checks (and would set) at start.
var kubeletSysctls = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

func (n *realNode) prepareMachine() error {
	// /proc/sys/net: the machine's own network namespace; read-only in a container.
	if err := openForWriting("/proc/sys/net/ipv4/ip_forward"); errors.Is(err, syscall.EROFS) {
		if err := syscall.Mount("/proc/sys/net", "/proc/sys/net", "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mounting /proc/sys/net: %w", err)
		}
		if err := syscall.Mount("", "/proc/sys/net", "", syscall.MS_REMOUNT|syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("making /proc/sys/net writable: %w", err)
		}
		n.logf("/proc/sys/net made writable (the machine's network namespace)")
	}
	// The kubelet's global sysctls: the values it wants, seen in this mount namespace only.
	valuesDir := "/run/k3s-standin/sysctl"
	names := make([]string, 0, len(kubeletSysctls))
	for name := range kubeletSysctls {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		want := kubeletSysctls[name]
		path := "/proc/sys/" + name
		current, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(current)) == want {
			continue
		}
		file := filepath.Join(valuesDir, strings.ReplaceAll(name, "/", "."))
		if err := os.MkdirAll(valuesDir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(file, []byte(want+"\n"), 0o644); err != nil {
			return err
		}
		if err := syscall.Mount(file, path, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mounting %s over %s: %w", file, path, err)
		}
		n.logf("%s reads %s in this machine (the kernel's value, %s, is not changed)", path, want, strings.TrimSpace(string(current)))
	}
	// The kubelet's cgroup root exists in every hierarchy (it refuses one that does not).
	if n.cgroupRoot != "/" {
		hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
		for _, procs := range hierarchies {
			if err := os.MkdirAll(filepath.Join(filepath.Dir(procs), n.cgroupRoot), 0o755); err != nil {
				return err
			}
		}
	}
	// containerd's root: overlayfs cannot hold overlay snapshots.
	root := filepath.Join(n.agentDir, "containerd")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return err
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(root, &fs); err != nil {
		return err
	}
	if fs.Type == overlayfsMagic {
		if err := syscall.Mount("tmpfs", root, "tmpfs", 0, "mode=0700"); err != nil {
			return fmt.Errorf("mounting a tmpfs on %s: %w", root, err)
		}
		n.logf("containerd's root %s is a tmpfs (the machine's disk is overlayfs)", root)
	}
	return nil
}

// openForWriting reports whether path can be opened for writing (without writing).
func openForWriting(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	return f.Close()
}

func (n *realNode) startContainerd(ctx context.Context) error {
	dir := filepath.Join(n.agentDir, "etc", "containerd")
	cniConf := filepath.Join(n.agentDir, "etc", "cni", "net.d")
	for _, d := range []string{dir, cniConf, containerdState} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	config := fmt.Sprintf(`# written by the k3s stand-in (lab/kube/node.go)
version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.internal.v1.opt", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # No CAP_SYS_RESOURCE here: a container's oom_score_adj may not go below containerd's own.
  restrict_oom_score_adj = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, filepath.Join(n.agentDir, "containerd"), containerdState, containerdSocket, n.node.pauseImage, n.cniBinDir, cniConf)
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return err
	}
	containerd, err := exec.LookPath("containerd")
	if err != nil {
		return err
	}
	return n.sup.startProgram(ctx, "containerd", containerd, func() ([]string, error) {
		return []string{"--config", path, "--log-level", "warn"}, nil
	}, func() error {
		out, err := exec.CommandContext(ctx, "ctr", "--address", containerdSocket, "version").CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctr version: %v: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	})
}

// ctr runs containerd's ctr against the node's containerd, in the CRI's namespace.
func ctr(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", containerdSocket, "--namespace", "k8s.io"}, args...)...)
	cmd.Stdin = stdin
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// importImages imports every image archive of <data-dir>/agent/images (as k3s does with its
// airgap images): `docker save` archives, .tar or .tar.gz.
func (n *realNode) importImages(ctx context.Context) error {
	dir := filepath.Join(n.agentDir, "images")
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	sort.Strings(files)
	for _, file := range files {
		started := time.Now()
		var input io.Reader
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		switch {
		case strings.HasSuffix(file, ".tar"):
			input = f
		case strings.HasSuffix(file, ".tar.gz") || strings.HasSuffix(file, ".tgz"):
			gz, err := gzip.NewReader(f)
			if err != nil {
				f.Close()
				return fmt.Errorf("%s: %w", file, err)
			}
			input = gz
		default:
			f.Close()
			n.logf("images: %s skipped (the stand-in imports .tar and .tar.gz archives)", file)
			continue
		}
		out, err := ctr(ctx, input, "images", "import", "--snapshotter", "overlayfs", "-")
		f.Close()
		if err != nil {
			return fmt.Errorf("importing the images of %s: %w", file, err)
		}
		n.logf("images: imported %s in %.1f s: %s", filepath.Base(file), time.Since(started).Seconds(), strings.Join(strings.Fields(out), " "))
	}
	listed, err := ctr(ctx, nil, "images", "list", "--quiet")
	if err != nil {
		return err
	}
	if !containsLine(listed, n.node.pauseImage) {
		n.logf("WARNING: the sandbox image %s is not among the images (%s): no pod can start; place a `docker save` archive holding it in %s", n.node.pauseImage, strings.Join(strings.Fields(listed), ", "), dir)
	}
	return nil
}

func containsLine(text, want string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.TrimSpace(line) == want {
			return true
		}
	}
	return false
}

func (n *realNode) startKubelet(ctx context.Context) error {
	caFile := filepath.Join(n.agentDir, "client-ca.crt")
	if err := os.WriteFile(caFile, n.caPEM, 0o644); err != nil {
		return err
	}
	config := fmt.Sprintf(`# written by the k3s stand-in (lab/kube/node.go)
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupRoot: %q
cgroupsPerQOS: true
failCgroupV1: false
containerRuntimeEndpoint: unix://%s
imageServiceEndpoint: unix://%s
clusterDomain: cluster.local
failSwapOn: false
protectKernelDefaults: false
oomScoreAdj: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
serializeImagePulls: false
# Images are imported, never pulled: nothing may remove them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "5%%", imagefs.available: "5%%"}
resolvConf: /etc/resolv.conf
`, caFile, n.cgroupRoot, containerdSocket, containerdSocket)
	path := filepath.Join(n.agentDir, "kubelet.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return err
	}
	return n.sup.startComponent(ctx, "kubelet", func() ([]string, error) {
		return append([]string{
			"--config=" + path,
			"--kubeconfig=" + n.kubeconfigPath,
			"--hostname-override=" + n.node.nodeName,
			"--node-ip=" + n.node.nodeIP,
			"--root-dir=" + kubeletRoot,
		}, n.node.kubeletArgs.flags()...), nil
	}, func() error { return probe(ctx, plainClient, kubeletHealthz, "ok") })
}

// waitForPodCIDR waits until the kubelet has registered the Node and the controller manager has
// given it its pod CIDR.
func (n *realNode) waitForPodCIDR(ctx context.Context) (string, error) {
	deadline := time.Now().Add(2 * time.Minute)
	var last error
	for time.Now().Before(deadline) {
		node, err := n.client.CoreV1().Nodes().Get(ctx, n.node.nodeName, metav1.GetOptions{})
		if err == nil && node.Spec.PodCIDR != "" {
			return node.Spec.PodCIDR, nil
		}
		if err == nil {
			err = errors.New("registered, no pod CIDR yet")
		}
		last = err
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return "", fmt.Errorf("node %s: no pod CIDR after 2 minutes: %w (the end of the kubelet's log:\n%s)", n.node.nodeName, last, tailOf(filepath.Join(n.sup.dataDir, "logs", "kubelet.log"), 3000))
}

func (n *realNode) startKubeProxy(ctx context.Context) error {
	config := fmt.Sprintf(`# written by the k3s stand-in (lab/kube/node.go)
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %q}
hostnameOverride: %q
bindAddress: 0.0.0.0
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: %q
mode: iptables
oomScoreAdj: 0
# nf_conntrack_max is the host's (global): left alone; so are the conntrack timeouts.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`, n.kubeconfigPath, n.node.nodeName, clusterCIDR)
	path := filepath.Join(n.agentDir, "kube-proxy.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return err
	}
	return n.sup.startComponent(ctx, "kube-proxy", func() ([]string, error) {
		return append([]string{"--config=" + path}, n.node.kubeProxyArgs.flags()...), nil
	}, func() error { return probe(ctx, plainClient, kubeProxyHealthz, "") })
}

// cleanup takes the node down (after containerd, the kubelet and kube-proxy have stopped), as
// k3s-killall.sh does.
func (n *realNode) cleanup() {
	started := time.Now()
	// The pods' processes, by their cgroups (several rounds: a dying process may leave children).
	for round := 0; round < 20; round++ {
		pids := cgroupProcesses(n.cgroupRoot)
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(250 * time.Millisecond)
	}
	// containerd's shims (they outlive containerd).
	for _, pid := range processesWith("containerd-shim", containerdSocket) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	time.Sleep(200 * time.Millisecond)
	// Mounts: the pods' volumes and root filesystems, network namespaces, containerd's tmpfs, and
	// what prepareMachine mounted.
	unmountUnder(kubeletRoot, "/run/k3s", filepath.Join(n.agentDir, "containerd"), "/run/netns", "/run/k3s-standin/sysctl")
	for name := range kubeletSysctls {
		if mounted("/proc/sys/" + name) {
			_ = syscall.Unmount("/proc/sys/"+name, syscall.MNT_DETACH)
		}
	}
	if mounted("/proc/sys/net") {
		_ = syscall.Unmount("/proc/sys/net", syscall.MNT_DETACH)
	}
	// Network: the bridge, the VXLAN device, host-local's leases, the firewall rules of
	// kube-proxy, the kubelet, the CNI plugins and the stand-in.
	for _, link := range []string{cniBridge, vxlanDevice} {
		_ = exec.Command("ip", "link", "delete", link).Run()
	}
	_ = os.RemoveAll("/var/lib/cni")
	for _, tool := range []string{"iptables", "ip6tables"} {
		removeRules(tool)
	}
	// The pods' cgroups.
	if n.cgroupRoot != "/" {
		removeCgroups(filepath.Join(n.cgroupRoot, "kubepods"))
	} else {
		removeCgroups("/kubepods")
	}
	n.logf("node %s taken down (pods, mounts, interfaces, firewall rules) in %.1f s", n.node.nodeName, time.Since(started).Seconds())
}

// cgroupProcesses lists the processes in the kubelet's pod cgroups (the pids hierarchy, or any).
func cgroupProcesses(root string) []int {
	var pids []int
	base := filepath.Join(root, "kubepods")
	for _, hierarchy := range []string{"pids", "memory", "cpu", "freezer"} {
		dir := filepath.Join("/sys/fs/cgroup", hierarchy, base)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(path)
			for _, field := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(field); err == nil && pid > 0 {
					pids = append(pids, pid)
				}
			}
			return nil
		})
		break
	}
	return pids
}

// processesWith lists the processes whose command line holds every one of words.
func processesWith(words ...string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, entry := range entries {
		pid, err := strconv.Atoi(entry.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", entry.Name(), "cmdline"))
		if err != nil {
			continue
		}
		line := strings.ReplaceAll(string(cmdline), "\x00", " ")
		all := true
		for _, word := range words {
			all = all && strings.Contains(line, word)
		}
		if all {
			pids = append(pids, pid)
		}
	}
	return pids
}

// mountPoints lists this mount namespace's mount points (decoded), in mount order.
func mountPoints() []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 4 {
			point, err := strconv.Unquote(`"` + strings.ReplaceAll(fields[4], `"`, `\"`) + `"`)
			if err != nil {
				point = fields[4]
			}
			points = append(points, point)
		}
	}
	return points
}

func mounted(path string) bool {
	for _, point := range mountPoints() {
		if point == path {
			return true
		}
	}
	return false
}

// unmountUnder unmounts every mount at or under the folders, deepest (latest) first.
func unmountUnder(dirs ...string) {
	points := mountPoints()
	for i := len(points) - 1; i >= 0; i-- {
		for _, dir := range dirs {
			if points[i] == dir || strings.HasPrefix(points[i], dir+"/") {
				_ = syscall.Unmount(points[i], syscall.MNT_DETACH)
				break
			}
		}
	}
}

// removeRules removes every rule and chain of kube-proxy, the kubelet, the CNI plugins and the
// stand-in (k3s-killall.sh's iptables-save | grep -v | iptables-restore).
func removeRules(tool string) {
	saved, err := exec.Command(tool + "-save").Output()
	if err != nil {
		return
	}
	var kept []string
	for _, line := range strings.Split(string(saved), "\n") {
		if strings.Contains(line, "KUBE-") || strings.Contains(line, "CNI-") || strings.Contains(line, standinChainPrefix) {
			continue
		}
		kept = append(kept, line)
	}
	restore := exec.Command(tool + "-restore")
	restore.Stdin = strings.NewReader(strings.Join(kept, "\n"))
	_ = restore.Run()
}

// removeCgroups removes a cgroup and its children in every hierarchy, deepest first.
func removeCgroups(cgroup string) {
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
	for _, procs := range hierarchies {
		top := filepath.Join(filepath.Dir(procs), cgroup)
		var dirs []string
		_ = filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = syscall.Rmdir(dirs[i])
		}
	}
}

// nodeInternalIP is a Node's InternalIP ("" when it has none).
func nodeInternalIP(node *corev1.Node) string {
	for _, address := range node.Status.Addresses {
		if address.Type == corev1.NodeInternalIP {
			return address.Address
		}
	}
	return ""
}

// interfaceMTU is the MTU of the interface holding ip (1500 when none does).
func interfaceMTU(ip string) (int, string) {
	interfaces, _ := net.Interfaces()
	for _, iface := range interfaces {
		addresses, _ := iface.Addrs()
		for _, address := range addresses {
			if prefix, ok := address.(*net.IPNet); ok && prefix.IP.String() == ip {
				return iface.MTU, iface.Name
			}
		}
	}
	return 1500, ""
}
