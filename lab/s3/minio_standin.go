// The machine lab's MinIO STAND-IN. It is NOT MinIO: MinIO cannot be had here (no image can be
// pulled, and its module is not built here). It serves REAL S3 — SeaweedFS's `weed server` with its
// S3 gateway, built from the Go module proxy beside this program (scripts/s3-build.sh) — and
// behaves like MinIO where hangar deploys and watches it:
//
//   - it is run as hangar runs MinIO: `minio server /data --console-address :9001` (the leading
//     `minio`, which the official image's entrypoint accepts, is optional; --address defaults to :9000);
//   - the root credentials are MINIO_ROOT_USER and MINIO_ROOT_PASSWORD, directly or through
//     MINIO_ROOT_USER_FILE / MINIO_ROOT_PASSWORD_FILE (a path, or a name under /run/secrets); it
//     exits 1 with MinIO's message when they are missing or too short (MinIO would fall back to
//     minioadmin when both are unset; hangar always sets them, so the stand-in insists). They are
//     the S3 access key and secret key: SeaweedFS checks every request's signature against them;
//   - it marks the data folder as MinIO does, <dir>/.minio.sys/format.json (kept when it exists),
//     and keeps SeaweedFS's data (volumes, the filer's metadata) in <dir>/.minio.sys/seaweedfs, so
//     a restarted store, or a new store on the same folder, finds its buckets and objects;
//   - the API port answers MinIO's health probes itself (/minio/health/live: 200 while it runs;
//     /minio/health/ready and /minio/health/cluster: 200 once SeaweedFS's S3 gateway answers and
//     its volume server has registered with its master, 503 before: a store restarted on a folder
//     serves the objects already there only from then) and passes everything else, untouched (Host and signature headers included), to
//     SeaweedFS's S3 gateway on loopback; answers carry `X-Hangar-Standin: minio (SeaweedFS)`;
//   - the console port answers a page saying there is no MinIO console here;
//   - SIGTERM or SIGINT stops SeaweedFS (SIGTERM, and SIGKILL 3 s later if it is still there) and
//     exits 0; SeaweedFS ending on its own ends the stand-in with exit code 1 (a restart policy
//     brings it back, as with MinIO).
//
// SeaweedFS's other listeners (master, volume server, filer, their gRPC ports, the S3 gateway
// itself) are on 127.0.0.1 at free ports; telemetry is off (nothing leaves the machine). The
// weed executable is found beside this one, as /usr/bin/weed, or at $HANGAR_WEED.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

const standinHeader = "X-Hangar-Standin"
const standinName = "minio (SeaweedFS)"

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "ERROR "+format+"\n", args...)
	os.Exit(1)
}

type options struct {
	dirs    []string
	address string
	console string
}

func parseArgs(args []string) options {
	if len(args) > 0 && args[0] == "minio" {
		args = args[1:]
	}
	if len(args) == 0 || args[0] != "server" {
		fail("hangar lab MinIO stand-in: only 'minio server <dir> [--address :9000] [--console-address :9001]' is supported")
	}
	o := options{address: ":9000"}
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--address" || a == "--console-address":
			if i+1 >= len(args) {
				fail("Incorrect Usage: flag needs an argument: %s", a)
			}
			if a == "--address" {
				o.address = args[i+1]
			} else {
				o.console = args[i+1]
			}
			i++
		case strings.HasPrefix(a, "--address="):
			o.address = strings.TrimPrefix(a, "--address=")
		case strings.HasPrefix(a, "--console-address="):
			o.console = strings.TrimPrefix(a, "--console-address=")
		case strings.HasPrefix(a, "-"):
			fail("Incorrect Usage: flag provided but not defined: %s (hangar lab MinIO stand-in)", a)
		default:
			o.dirs = append(o.dirs, a)
		}
	}
	if len(o.dirs) == 0 {
		fail("Incorrect Usage: minio server needs at least one data folder")
	}
	if len(o.dirs) > 1 {
		fail("hangar lab MinIO stand-in: serves one data folder (no erasure sets), given %d", len(o.dirs))
	}
	return o
}

// fromEnv reads NAME, or the file NAME_FILE names (an absolute path, or a docker secret's name
// under /run/secrets), trimmed as MinIO trims it.
func fromEnv(name string) string {
	if file := os.Getenv(name + "_FILE"); file != "" {
		path := file
		if !filepath.IsAbs(path) {
			path = filepath.Join("/run/secrets", file)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			fail("Unable to read %s_FILE from %s: %v", name, file, err)
		}
		return strings.TrimSpace(string(data))
	}
	return os.Getenv(name)
}

// listenAddress turns MinIO's [host]:port into an address to listen on.
func listenAddress(flag, value string) string {
	host, port, err := net.SplitHostPort(value)
	if err != nil {
		fail("Invalid %s %s: expected [host]:port", flag, value)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		fail("Invalid %s %s: expected [host]:port", flag, value)
	}
	return net.JoinHostPort(host, port)
}

// markDataFolder creates <dir>/.minio.sys/format.json unless it is there, and returns the folder
// SeaweedFS keeps its data in.
func markDataFolder(dir string) string {
	sys := filepath.Join(dir, ".minio.sys")
	if err := os.MkdirAll(sys, 0o755); err != nil {
		fail("Unable to use the drive %s: %v", dir, err)
	}
	format := filepath.Join(sys, "format.json")
	if info, err := os.Stat(format); err != nil || info.Size() == 0 {
		id := make([]byte, 16)
		_, _ = rand.Read(id)
		id[6] = id[6]&0x0f | 0x40
		id[8] = id[8]&0x3f | 0x80
		h := hex.EncodeToString(id)
		uuid := h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
		body, _ := json.Marshal(map[string]string{
			"version": "1",
			"format":  "hangar-lab-standin",
			"id":      uuid,
			"backend": "seaweedfs",
			"standin": "hangar lab MinIO stand-in, not MinIO",
		})
		if err := os.WriteFile(format, append(body, '\n'), 0o644); err != nil {
			fail("Unable to use the drive %s: not writable: %v", dir, err)
		}
	}
	data := filepath.Join(sys, "seaweedfs")
	if err := os.MkdirAll(data, 0o700); err != nil {
		fail("Unable to use the drive %s: %v", dir, err)
	}
	return data
}

// freePorts reserves n distinct free TCP ports on 127.0.0.1 (released just before weed binds them).
func freePorts(n int) []int {
	ports := make([]int, 0, n)
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fail("hangar lab MinIO stand-in: no free port: %v", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

func weedExecutable() string {
	if p := os.Getenv("HANGAR_WEED"); p != "" {
		return p
	}
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), "weed"); fileExists(p) {
			return p
		}
	}
	return "/usr/bin/weed"
}

func fileExists(p string) bool {
	info, err := os.Stat(p)
	return err == nil && !info.IsDir()
}

// s3Identities is SeaweedFS's -s3.config: the root user as its one identity, an administrator.
func s3Identities(user, password string) []byte {
	body, _ := json.MarshalIndent(map[string]any{
		"identities": []any{map[string]any{
			"name":        user,
			"credentials": []any{map[string]string{"accessKey": user, "secretKey": password}},
			"actions":     []string{"Admin", "Read", "List", "Tagging", "Write"},
		}},
	}, "", "  ")
	return body
}

func main() {
	o := parseArgs(os.Args[1:])
	user, password := fromEnv("MINIO_ROOT_USER"), fromEnv("MINIO_ROOT_PASSWORD")
	if user == "" || password == "" {
		fail("Unable to validate credentials inherited from the shell environment: MINIO_ROOT_USER and MINIO_ROOT_PASSWORD must both be set (hangar lab MinIO stand-in)")
	}
	if len(user) < 3 || len(password) < 8 {
		fail("Unable to validate credentials inherited from the shell environment: Invalid credentials\n" +
			"      > Please provide correct credentials\n" +
			"      HINT:\n" +
			"        Access key length should be at least 3, and secret key length at least 8 characters")
	}
	api := listenAddress("--address", o.address)
	console := ""
	if o.console != "" {
		console = listenAddress("--console-address", o.console)
	}
	weed := weedExecutable()
	if !fileExists(weed) {
		fail("hangar lab MinIO stand-in: SeaweedFS's weed is not at %s (set HANGAR_WEED)", weed)
	}
	data := markDataFolder(o.dirs[0])

	// The credentials go to SeaweedFS in a file only this process's user reads, outside the data folder.
	private, err := os.MkdirTemp("", "minio-standin-")
	if err != nil {
		fail("hangar lab MinIO stand-in: %v", err)
	}
	config := filepath.Join(private, "s3.json")
	if err := os.WriteFile(config, s3Identities(user, password), 0o600); err != nil {
		_ = os.RemoveAll(private)
		fail("hangar lab MinIO stand-in: %v", err)
	}

	p := freePorts(8)
	s3Port := p[6]
	args := []string{
		"server", "-dir=" + data, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port=" + strconv.Itoa(p[0]), "-master.port.grpc=" + strconv.Itoa(p[1]),
		"-master.telemetry=false", "-master.telemetry.url=", "-master.volumeSizeLimitMB=1024",
		"-volume.port=" + strconv.Itoa(p[2]), "-volume.port.grpc=" + strconv.Itoa(p[3]), "-volume.max=0", "-volume.preStopSeconds=0",
		"-filer", "-filer.port=" + strconv.Itoa(p[4]), "-filer.port.grpc=" + strconv.Itoa(p[5]),
		"-s3", "-s3.port=" + strconv.Itoa(s3Port), "-s3.port.grpc=" + strconv.Itoa(p[7]),
		"-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.config=" + config,
	}
	cmd := exec.Command(weed, args...)
	cmd.Dir = private
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	// weed dies with the stand-in, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(private)
		fail("hangar lab MinIO stand-in: starting %s: %v", weed, err)
	}
	weedDone := make(chan error, 1)
	go func() { weedDone <- cmd.Wait() }()

	upstream := &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(s3Port)}
	proxy := httputil.NewSingleHostReverseProxy(upstream)
	proxy.ModifyResponse = func(res *http.Response) error {
		res.Header.Set(standinHeader, standinName)
		return nil
	}
	proxy.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, err error) {
		w.Header().Set(standinHeader, standinName)
		http.Error(w, "hangar lab MinIO stand-in: SeaweedFS's S3 gateway is not answering yet: "+err.Error(), http.StatusServiceUnavailable)
	}
	var ready atomic.Bool
	probe := &http.Client{Timeout: 2 * time.Second}
	master := "http://127.0.0.1:" + strconv.Itoa(p[0])
	isReady := func() bool {
		if ready.Load() {
			return true
		}
		res, err := probe.Get(upstream.String() + "/healthz")
		if err != nil {
			return false
		}
		_ = res.Body.Close()
		if res.StatusCode == http.StatusOK && volumeServerRegistered(probe, master) {
			ready.Store(true)
		}
		return ready.Load()
	}
	mux := http.NewServeMux()
	health := func(needReady bool) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set(standinHeader, standinName)
			if needReady && !isReady() {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
		}
	}
	mux.Handle("/minio/health/live", health(false))
	mux.Handle("/minio/health/ready", health(true))
	mux.Handle("/minio/health/cluster", health(true))
	mux.Handle("/", proxy)
	servers := []*http.Server{{Addr: api, Handler: mux, ReadHeaderTimeout: 30 * time.Second}}
	if console != "" {
		servers = append(servers, &http.Server{Addr: console, ReadHeaderTimeout: 30 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set(standinHeader, standinName)
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, "<!doctype html><title>hangar lab MinIO stand-in</title><p>hangar lab MinIO stand-in: console (none here: the S3 API is SeaweedFS's, not MinIO's)</p>\n")
		})})
	}

	fmt.Printf("hangar lab MinIO stand-in (NOT MinIO: SeaweedFS's S3 gateway) for user %s\n", user)
	fmt.Printf("S3-API: http://%s  (health: /minio/health/live, /minio/health/ready)\n", api)
	if console != "" {
		fmt.Printf("Console stand-in: http://%s\n", console)
	}
	fmt.Printf("Data folder: %s (SeaweedFS data in %s)\n", o.dirs[0], data)

	serverDone := make(chan error, len(servers))
	for _, s := range servers {
		l, err := net.Listen("tcp", s.Addr)
		if err != nil {
			_ = cmd.Process.Kill()
			_ = os.RemoveAll(private)
			fail("hangar lab MinIO stand-in: listening on %s: %v", s.Addr, err)
		}
		go func(s *http.Server) { serverDone <- s.Serve(l) }(s)
	}

	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	code := 0
	select {
	case sig := <-signals:
		fmt.Printf("hangar lab MinIO stand-in: %v, stopping SeaweedFS\n", sig)
	case err := <-weedDone:
		fmt.Fprintf(os.Stderr, "ERROR hangar lab MinIO stand-in: SeaweedFS ended: %v\n", err)
		weedDone <- err
		code = 1
	case err := <-serverDone:
		fmt.Fprintf(os.Stderr, "ERROR hangar lab MinIO stand-in: an HTTP server ended: %v\n", err)
		code = 1
	}
	for _, s := range servers {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.Shutdown(ctx)
		cancel()
	}
	// weed shuts its volume server and filer down (closing their files) well within a second of
	// SIGTERM, but its process does not end after that (SeaweedFS 4.53): it gets SIGKILL after 3 s.
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-weedDone:
	case <-time.After(3 * time.Second):
		_ = cmd.Process.Kill()
		<-weedDone
	}
	_ = os.RemoveAll(private)
	os.Exit(code)
}

// volumeServerRegistered says whether weed's master knows a volume server (its topology names a
// data node): the volume server's first heartbeat carries the volumes already on disk, and until
// it has arrived a read of an object stored before a restart fails (500 InternalError).
func volumeServerRegistered(probe *http.Client, master string) bool {
	res, err := probe.Get(master + "/dir/status")
	if err != nil {
		return false
	}
	defer res.Body.Close()
	var status struct {
		Topology struct {
			DataCenters []struct {
				Racks []struct {
					DataNodes []json.RawMessage
				}
			}
		}
	}
	if res.StatusCode != http.StatusOK || json.NewDecoder(res.Body).Decode(&status) != nil {
		return false
	}
	for _, dc := range status.Topology.DataCenters {
		for _, rack := range dc.Racks {
			if len(rack.DataNodes) > 0 {
				return true
			}
		}
	}
	return false
}
