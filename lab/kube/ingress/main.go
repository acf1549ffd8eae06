// Command hangar-ingress is the machine lab's ingress controller: HAProxy (Debian's, the same as
// the lab/haproxy image the swarm gateway uses) configured from the Ingresses of one class by this
// small controller. It is NOT Traefik, which hangar deploys on a real k3s cluster (Traefik's image
// cannot be had here). It runs in the image lab/hangar-ingress (lab-k8s-images on a lab machine)
// as the container's command, and takes the flags hangar's Kubernetes driver gives Traefik
// (drivers/kubernetes/loadbalancer.ts), so that the driver deploys it unchanged as
// gateway.kubernetes_image:
//
//	--entryPoints.web.address=:8000                   where HAProxy listens (HTTP)
//	--providers.kubernetesingress.ingressclass=hangar the Ingresses it serves (by class name)
//	--ping=true                                       /ping answers 200 "OK" on that address
//	(other --providers.*, --ping.*, --entryPoints.* flags are accepted and ignored)
//
// Every 2 s it reads the Ingresses of its class and the Services they name from the API server
// (in-cluster: the pod's service account token, the kubernetes Service's address), writes
// haproxy.cfg — one backend per rule, host matched without port, the longest path prefix first,
// sending to the Service's cluster IP and port (kube-proxy balances over the ready endpoints) —
// and, when it changed, has HAProxy reload it (SIGUSR2 to its master: no connection dropped).
// Requests for no known host get 404. It logs the routing table at each change (HAProxy logs each
// request), and on SIGTERM stops HAProxy softly (SIGUSR1) and exits with it. (It does not write
// the Ingresses' status, which Traefik does.)
//
// Standard library only, so the executable stays small (it is part of an image every node
// imports).
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const serviceAccount = "/var/run/secrets/kubernetes.io/serviceaccount"

type options struct {
	address string
	class   string
	ping    bool
	config  string
	haproxy string
}

func parseFlags(args []string) (options, error) {
	o := options{address: ":8000", class: "hangar", config: "/tmp/hangar-ingress/haproxy.cfg", haproxy: "haproxy"}
	for _, arg := range args {
		name, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		switch strings.ToLower(name) {
		case "entrypoints.web.address":
			o.address = value
		case "providers.kubernetesingress.ingressclass", "ingress-class":
			o.class = value
		case "ping":
			o.ping = !hasValue || value == "true"
		case "config":
			o.config = value
		case "haproxy":
			o.haproxy = value
		default:
			if !strings.HasPrefix(strings.ToLower(name), "providers.") && !strings.HasPrefix(strings.ToLower(name), "ping.") && !strings.HasPrefix(strings.ToLower(name), "entrypoints.") {
				return o, fmt.Errorf("unknown flag %s", arg)
			}
		}
	}
	if o.class == "" {
		return o, fmt.Errorf("no ingress class")
	}
	return o, nil
}

// client is an in-cluster API client (standard library only).
type client struct {
	base  string
	token string
	http  *http.Client
}

func inCluster() (*client, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, fmt.Errorf("not in a pod (no KUBERNETES_SERVICE_HOST/PORT)")
	}
	token, err := os.ReadFile(filepath.Join(serviceAccount, "token"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(filepath.Join(serviceAccount, "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &client{
		base:  "https://" + net.JoinHostPort(host, port),
		token: strings.TrimSpace(string(token)),
		http:  &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}},
	}, nil
}

func (c *client) do(method, path string, body any, into any) error {
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, c.base+path, reader)
	if err != nil {
		return err
	}
	// The token is re-read: the kubelet rotates projected tokens.
	if token, err := os.ReadFile(filepath.Join(serviceAccount, "token")); err == nil {
		c.token = strings.TrimSpace(string(token))
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, strings.TrimSpace(string(data)))
	}
	if into != nil {
		return json.Unmarshal(data, into)
	}
	return nil
}

type meta struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

type ingressBackend struct {
	Service *struct {
		Name string `json:"name"`
		Port struct {
			Number int    `json:"number"`
			Name   string `json:"name"`
		} `json:"port"`
	} `json:"service"`
}

type ingress struct {
	Metadata meta `json:"metadata"`
	Spec     struct {
		IngressClassName *string         `json:"ingressClassName"`
		DefaultBackend   *ingressBackend `json:"defaultBackend"`
		Rules            []struct {
			Host string `json:"host"`
			HTTP *struct {
				Paths []struct {
					Path     string         `json:"path"`
					PathType string         `json:"pathType"`
					Backend  ingressBackend `json:"backend"`
				} `json:"paths"`
			} `json:"http"`
		} `json:"rules"`
	} `json:"spec"`
}

type service struct {
	Metadata meta `json:"metadata"`
	Spec     struct {
		ClusterIP string `json:"clusterIP"`
		Ports     []struct {
			Name string `json:"name"`
			Port int    `json:"port"`
		} `json:"ports"`
	} `json:"spec"`
}

// route: requests for host (any when empty) under path go to address.
type route struct {
	host, path, exact string
	ingress, target   string // for the log: namespace/ingress, service:port
	address           string // cluster IP:port; empty when the Service or its port is unknown
}

func (c *client) routes(class string) ([]route, error) {
	var ingresses struct{ Items []ingress }
	if err := c.do(http.MethodGet, "/apis/networking.k8s.io/v1/ingresses", nil, &ingresses); err != nil {
		return nil, err
	}
	var services struct{ Items []service }
	if err := c.do(http.MethodGet, "/api/v1/services", nil, &services); err != nil {
		return nil, err
	}
	byName := map[string]service{}
	for _, s := range services.Items {
		byName[s.Metadata.Namespace+"/"+s.Metadata.Name] = s
	}
	var routes []route
	for _, in := range ingresses.Items {
		if in.Spec.IngressClassName == nil || *in.Spec.IngressClassName != class {
			continue
		}
		add := func(host, path, pathType string, backend ingressBackend) {
			if backend.Service == nil {
				return
			}
			r := route{host: strings.ToLower(host), path: path, ingress: in.Metadata.Namespace + "/" + in.Metadata.Name}
			if r.path == "" {
				r.path = "/"
			}
			if pathType == "Exact" {
				r.exact = r.path
			}
			port := backend.Service.Port.Number
			s, ok := byName[in.Metadata.Namespace+"/"+backend.Service.Name]
			if ok {
				for _, p := range s.Spec.Ports {
					if port == 0 && p.Name == backend.Service.Port.Name {
						port = p.Port
					}
				}
			}
			r.target = fmt.Sprintf("%s:%d", backend.Service.Name, port)
			if port == 0 && backend.Service.Port.Name != "" {
				r.target = backend.Service.Name + ":" + backend.Service.Port.Name
			}
			if ok && port != 0 && s.Spec.ClusterIP != "" && s.Spec.ClusterIP != "None" {
				r.address = net.JoinHostPort(s.Spec.ClusterIP, strconv.Itoa(port))
			}
			routes = append(routes, r)
		}
		for _, rule := range in.Spec.Rules {
			if rule.HTTP == nil {
				continue
			}
			for _, p := range rule.HTTP.Paths {
				add(rule.Host, p.Path, p.PathType, p.Backend)
			}
		}
		if in.Spec.DefaultBackend != nil {
			add("", "/", "Prefix", *in.Spec.DefaultBackend)
		}
	}
	// Hosts first (a rule for any host comes after every named one), then the longest path.
	sort.SliceStable(routes, func(i, j int) bool {
		a, b := routes[i], routes[j]
		if (a.host == "") != (b.host == "") {
			return a.host != ""
		}
		if len(a.path) != len(b.path) {
			return len(a.path) > len(b.path)
		}
		return a.host < b.host
	})
	return routes, nil
}

func render(o options, routes []route) string {
	var b strings.Builder
	b.WriteString("# written by hangar-ingress (the machine lab's ingress controller)\n")
	b.WriteString("global\n  log stdout format raw local0\n\n")
	b.WriteString("defaults\n  mode http\n  log global\n  option httplog\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n\n")
	fmt.Fprintf(&b, "frontend web\n  bind %s\n", o.address)
	if o.ping {
		b.WriteString("  http-request return status 200 content-type text/plain string \"OK\" if { path /ping }\n")
	}
	b.WriteString("  http-request set-var(txn.host) req.hdr(host),field(1,:),lower\n")
	for i, r := range routes {
		var conditions []string
		if r.host != "" {
			conditions = append(conditions, fmt.Sprintf("{ var(txn.host) -m str %s }", r.host))
		}
		if r.exact != "" {
			conditions = append(conditions, fmt.Sprintf("{ path -m str %s }", r.exact))
		} else if r.path != "/" {
			prefix := strings.TrimSuffix(r.path, "/")
			conditions = append(conditions, fmt.Sprintf("{ path -m str %s } || { path -m beg %s/ }", prefix, prefix))
		}
		if len(conditions) == 0 {
			fmt.Fprintf(&b, "  use_backend route%d\n", i)
		} else if len(conditions) == 2 && strings.Contains(conditions[1], "||") {
			// host AND (exact OR prefix/): HAProxy's || binds looser than the implicit AND.
			parts := strings.SplitN(conditions[1], " || ", 2)
			fmt.Fprintf(&b, "  use_backend route%d if %s %s || %s %s\n", i, conditions[0], parts[0], conditions[0], parts[1])
		} else {
			fmt.Fprintf(&b, "  use_backend route%d if %s\n", i, strings.Join(conditions, " "))
		}
	}
	b.WriteString("  default_backend unknown\n\n")
	b.WriteString("backend unknown\n  http-request return status 404 content-type text/plain string \"hangar-ingress: no route for this host\"\n\n")
	for i, r := range routes {
		fmt.Fprintf(&b, "backend route%d\n  # %s: %s%s -> %s\n", i, r.ingress, r.host, r.path, r.target)
		if r.address == "" {
			fmt.Fprintf(&b, "  http-request return status 503 content-type text/plain string \"hangar-ingress: service %s not found\"\n\n", r.target)
			continue
		}
		fmt.Fprintf(&b, "  server s1 %s\n\n", r.address)
	}
	return b.String()
}

func describe(routes []route) string {
	if len(routes) == 0 {
		return "no routes"
	}
	lines := make([]string, 0, len(routes))
	for _, r := range routes {
		host := r.host
		if host == "" {
			host = "*"
		}
		to := r.address
		if to == "" {
			to = "not found"
		}
		lines = append(lines, fmt.Sprintf("%s%s -> %s (%s)", host, r.path, r.target, to))
	}
	return strings.Join(lines, "; ")
}

func main() {
	log.SetFlags(log.LstdFlags | log.LUTC)
	log.SetPrefix("hangar-ingress: ")
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		log.Fatalf("%v (flags: --entryPoints.web.address=:PORT --providers.kubernetesingress.ingressclass=CLASS --ping)", err)
	}
	c, err := inCluster()
	if err != nil {
		log.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(o.config), 0o755); err != nil {
		log.Fatal(err)
	}
	routes, err := c.routes(o.class)
	for err != nil {
		log.Printf("reading the Ingresses of class %s: %v (again in 2 s)", o.class, err)
		time.Sleep(2 * time.Second)
		routes, err = c.routes(o.class)
	}
	config := render(o, routes)
	if err := os.WriteFile(o.config, []byte(config), 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("serving the Ingresses of class %s on %s: %s", o.class, o.address, describe(routes))
	proxy := exec.Command(o.haproxy, "-W", "-db", "-f", o.config)
	proxy.Stdout, proxy.Stderr = os.Stdout, os.Stderr
	if err := proxy.Start(); err != nil {
		log.Fatalf("starting haproxy: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- proxy.Wait() }()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	for {
		select {
		case err := <-exited:
			log.Fatalf("haproxy exited: %v", err)
		case sig := <-signals:
			log.Printf("%s: stopping haproxy softly", sig)
			_ = proxy.Process.Signal(syscall.SIGUSR1)
			select {
			case <-exited:
			case <-time.After(20 * time.Second):
				_ = proxy.Process.Kill()
			}
			os.Exit(0)
		case <-time.After(2 * time.Second):
		}
		routes, err := c.routes(o.class)
		if err != nil {
			log.Printf("reading the Ingresses of class %s: %v", o.class, err)
			continue
		}
		next := render(o, routes)
		if next == config {
			continue
		}
		if err := os.WriteFile(o.config+".new", []byte(next), 0o644); err == nil {
			err = os.Rename(o.config+".new", o.config)
		}
		if err != nil {
			log.Printf("writing %s: %v", o.config, err)
			continue
		}
		config = next
		log.Printf("routes changed, reloading haproxy: %s", describe(routes))
		_ = proxy.Process.Signal(syscall.SIGUSR2)
	}
}
