package main

// The pod network of the stand-in's real nodes: flannel's VXLAN scheme, done by the stand-in
// itself (flannel is not built here). Each node has its pod CIDR from the controller manager
// (10.42.N.0/24 of 10.42.0.0/16); its pods sit on the bridge cni0 (the CNI bridge plugin with
// host-local addresses of that CIDR, and portmap for host ports); a VXLAN device k3s-vxlan
// (VNI 1, UDP 8472, flannel's port) whose address is the CIDR's network address carries pod
// traffic to the other nodes over the node addresses — the addresses the nodes joined with, so
// over hangar's WireGuard overlay when the cluster advertises overlay addresses. Each node
// publishes its VTEP's MAC address in an annotation of its Node; every node routes each other
// node's CIDR through k3s-vxlan with a static neighbour and forwarding entry (no learning), kept
// in step with the Node list every few seconds. Pod traffic leaving the cluster CIDR is
// masqueraded to the node's address; forwarding of the cluster CIDR is accepted (dockerd sets the
// FORWARD policy to DROP).

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	cniBridge          = "cni0"
	vxlanDevice        = "k3s-vxlan"
	vxlanID            = "1"
	vxlanPort          = "8472"
	vxlanOverhead      = 50
	standinChainPrefix = "K3S-STANDIN-"
	vtepMACAnnotation  = "k3s-standin.hangar.dev/vtep-mac"
	// addressesAnnotation: every address of the machine a request from outside may come to (for
	// the service load balancer, servicelb.go), comma-separated.
	addressesAnnotation = "k3s-standin.hangar.dev/addresses"
)

type podPeer struct {
	cidr    string // the node's pod CIDR
	vtep    string // its network address: the peer's VTEP address
	mac     string // the peer's VTEP MAC
	address string // the node's address (the VXLAN underlay)
}

type podNetwork struct {
	node     *realNode
	podCIDR  *net.IPNet
	vtep     string
	mac      string
	mtu      int
	underlay string
	peers    map[string]podPeer
	lastErr  string
}

func newPodNetwork(n *realNode, podCIDR string) (*podNetwork, error) {
	_, cidr, err := net.ParseCIDR(podCIDR)
	if err != nil {
		return nil, fmt.Errorf("pod CIDR %q: %w", podCIDR, err)
	}
	mtu, underlay := interfaceMTU(n.node.nodeIP)
	if underlay == "" {
		return nil, fmt.Errorf("no interface holds the node address %s", n.node.nodeIP)
	}
	sum := sha256.Sum256([]byte("k3s-standin vtep\x00" + n.node.nodeName))
	sum[0] = (sum[0] & 0xfe) | 0x02 // unicast, locally administered
	mac := net.HardwareAddr(sum[:6]).String()
	return &podNetwork{node: n, podCIDR: cidr, vtep: cidr.IP.String(), mac: mac, mtu: mtu - vxlanOverhead, underlay: underlay, peers: map[string]podPeer{}}, nil
}

// run runs a command, its output in the error.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (p *podNetwork) setUp(ctx context.Context) error {
	n := p.node
	if exec.Command("ip", "link", "show", vxlanDevice).Run() != nil {
		if err := run("ip", "link", "add", vxlanDevice, "type", "vxlan", "id", vxlanID, "local", n.node.nodeIP, "dev", p.underlay,
			"dstport", vxlanPort, "nolearning"); err != nil {
			return err
		}
	}
	steps := [][]string{
		{"ip", "link", "set", vxlanDevice, "address", p.mac, "mtu", fmt.Sprint(p.mtu)},
		{"ip", "address", "replace", p.vtep + "/32", "dev", vxlanDevice},
		{"ip", "link", "set", vxlanDevice, "up"},
	}
	for _, step := range steps {
		if err := run(step[0], step[1:]...); err != nil {
			return err
		}
	}
	if err := p.writeCNIConfig(); err != nil {
		return err
	}
	if err := p.firewall(); err != nil {
		return err
	}
	annotations := map[string]string{vtepMACAnnotation: p.mac, addressesAnnotation: strings.Join(machineAddresses(), ",")}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if _, err := n.client.CoreV1().Nodes().Patch(ctx, n.node.nodeName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "k3s-standin"}); err != nil {
		return fmt.Errorf("publishing the VTEP address of node %s: %w", n.node.nodeName, err)
	}
	n.logf("pod network: %s on %s (VTEP %s %s, MTU %d over %s)", p.podCIDR, cniBridge, p.vtep, p.mac, p.mtu, p.underlay)
	return p.sync(ctx)
}

func (p *podNetwork) writeCNIConfig() error {
	config := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "k3s-standin",
		"plugins": []map[string]any{
			{
				"type": "bridge", "bridge": cniBridge, "isGateway": true, "isDefaultGateway": true,
				"hairpinMode": true, "forceAddress": true, "mtu": p.mtu,
				"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": p.podCIDR.String()}}}},
			},
			{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	data, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Join(p.node.agentDir, "etc", "cni", "net.d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "10-k3s-standin.conflist"), data, 0o644)
}

// firewall: forwarding of the cluster CIDR accepted, pod traffic leaving it masqueraded.
func (p *podNetwork) firewall() error {
	forward, postrouting := standinChainPrefix+"FORWARD", standinChainPrefix+"POSTROUTING"
	rules := []struct {
		table, chain, parent string
		rules                [][]string
	}{
		{"filter", forward, "FORWARD", [][]string{{"-s", clusterCIDR, "-j", "ACCEPT"}, {"-d", clusterCIDR, "-j", "ACCEPT"}}},
		{"nat", postrouting, "POSTROUTING", [][]string{
			{"-s", clusterCIDR, "-d", clusterCIDR, "-j", "RETURN"},
			{"-s", clusterCIDR, "!", "-d", "224.0.0.0/4", "-j", "MASQUERADE"},
		}},
	}
	for _, r := range rules {
		_ = exec.Command("iptables", "-w", "-t", r.table, "-N", r.chain).Run() // exists already: fine
		if err := run("iptables", "-w", "-t", r.table, "-F", r.chain); err != nil {
			return err
		}
		for _, rule := range r.rules {
			if err := run("iptables", append([]string{"-w", "-t", r.table, "-A", r.chain}, rule...)...); err != nil {
				return err
			}
		}
		if exec.Command("iptables", "-w", "-t", r.table, "-C", r.parent, "-j", r.chain).Run() != nil {
			if err := run("iptables", "-w", "-t", r.table, "-I", r.parent, "1", "-j", r.chain); err != nil {
				return err
			}
		}
	}
	return nil
}

// sync routes every other node's pod CIDR through the VXLAN device, and forgets nodes gone.
func (p *podNetwork) sync(ctx context.Context) error {
	nodes, err := p.node.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	want := map[string]podPeer{}
	for i := range nodes.Items {
		node := &nodes.Items[i]
		if node.Name == p.node.node.nodeName || node.Spec.PodCIDR == "" {
			continue
		}
		mac, address := node.Annotations[vtepMACAnnotation], nodeInternalIP(node)
		_, cidr, err := net.ParseCIDR(node.Spec.PodCIDR)
		if mac == "" || address == "" || err != nil {
			continue // not a real node of the stand-in (yet)
		}
		want[node.Name] = podPeer{cidr: cidr.String(), vtep: cidr.IP.String(), mac: mac, address: address}
	}
	var problems []string
	for name, peer := range want {
		if p.peers[name] == peer {
			continue
		}
		if old, ok := p.peers[name]; ok {
			p.removePeer(old)
		}
		steps := [][]string{
			{"ip", "neigh", "replace", peer.vtep, "lladdr", peer.mac, "dev", vxlanDevice, "nud", "permanent"},
			{"bridge", "fdb", "replace", peer.mac, "dev", vxlanDevice, "dst", peer.address, "self", "permanent"},
			{"ip", "route", "replace", peer.cidr, "via", peer.vtep, "dev", vxlanDevice, "onlink"},
		}
		ok := true
		for _, step := range steps {
			if err := run(step[0], step[1:]...); err != nil {
				problems = append(problems, err.Error())
				ok = false
				break
			}
		}
		if ok {
			p.peers[name] = peer
			p.node.logf("pod network: %s (%s) through %s", peer.cidr, name, peer.address)
		}
	}
	for name, peer := range p.peers {
		if _, ok := want[name]; !ok {
			p.removePeer(peer)
			delete(p.peers, name)
			p.node.logf("pod network: %s (%s) gone", peer.cidr, name)
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

func (p *podNetwork) removePeer(peer podPeer) {
	_ = exec.Command("ip", "route", "delete", peer.cidr, "dev", vxlanDevice).Run()
	_ = exec.Command("ip", "neigh", "delete", peer.vtep, "dev", vxlanDevice).Run()
	_ = exec.Command("bridge", "fdb", "delete", peer.mac, "dev", vxlanDevice, "dst", peer.address, "self").Run()
}

// run keeps the routes in step with the nodes until ctx ends.
func (p *podNetwork) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(3 * time.Second):
		}
		err := p.sync(ctx)
		message := ""
		if err != nil && ctx.Err() == nil {
			message = err.Error()
		}
		if message != p.lastErr {
			if message != "" {
				p.node.logf("pod network: %s", message)
			}
			p.lastErr = message
		}
	}
}

// machineAddresses lists the machine's IPv4 addresses that the outside may reach it at: every
// global unicast address but those of container bridges, veths and the pod network's devices.
func machineAddresses() []string {
	var found []string
	interfaces, _ := net.Interfaces()
	for _, iface := range interfaces {
		name := iface.Name
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 || name == cniBridge || name == vxlanDevice ||
			strings.HasPrefix(name, "docker") || strings.HasPrefix(name, "br-") || strings.HasPrefix(name, "veth") {
			continue
		}
		addresses, _ := iface.Addrs()
		for _, address := range addresses {
			if prefix, ok := address.(*net.IPNet); ok && prefix.IP.To4() != nil && prefix.IP.IsGlobalUnicast() {
				found = append(found, prefix.IP.String())
			}
		}
	}
	sort.Strings(found)
	return found
}
