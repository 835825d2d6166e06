package clusterset

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"vksfleet.dev/fleet/test/env/proc"
)

// controllers are the kube-controller-manager controllers a member runs: enough for Deployments and
// StatefulSets to get pods, for pods to land in EndpointSlices, and for namespaces and owned objects to go away.
var controllers = []string{
	"endpointslice", "endpointslicemirroring", "namespace", "garbagecollector",
	"deployment", "replicaset", "statefulset", "job",
}

// kubeletControllers are added for kubelet nodes: a kubelet registers its Node with the not-ready taint, which
// only the node lifecycle controller removes once the Node is Ready; pods get their ServiceAccount token only if
// the ServiceAccount exists (every namespace's default one) and the kube-root-ca.crt ConfigMap their token volume
// holds is published.
var kubeletControllers = []string{"nodelifecycle", "serviceaccount", "root-ca-cert-publisher"}

// brokerControllers are what every broker runs, as any real API server has them: members join and leave with
// kubectl mcs, and unjoin deletes a member's broker namespace, which only the namespace controller empties and
// removes; each member's broker namespace has a ResourceQuota, and quota admission refuses every write in it until
// the quota controller has computed its usage.
var brokerControllers = []string{"namespace", "garbagecollector", "resourcequota"}

// startControllerManager starts kube-controller-manager with the controllers ctrls and waits until its /healthz
// answers. For a member with kubelet nodes, rootCAFile is the API server's serving CA: kubeletControllers run too,
// and publish it.
func startControllerManager(ctx context.Context, assets, dir, kubeconfig, rootCAFile string, ctrls []string, log io.Writer) (*proc.Process, error) {
	var extra []string
	if rootCAFile != "" {
		ctrls = append(slices.Clip(ctrls), kubeletControllers...)
		extra = append(extra, "--root-ca-file="+rootCAFile)
	}
	return startComponent(ctx, assets, "kube-controller-manager", dir, kubeconfig, log, append(extra,
		"--controllers="+strings.Join(ctrls, ","),
		"--use-service-account-credentials=false",
		// Objects arrive by the thousand in benchmarks; the default 20 QPS would make kcm the bottleneck.
		"--kube-api-qps=1000",
		"--kube-api-burst=2000",
		"--concurrent-service-endpoint-syncs=10",
		"--concurrent-gc-syncs=40",
	)...)
}

// startScheduler starts kube-scheduler and waits until its /healthz answers.
func startScheduler(ctx context.Context, assets, dir, kubeconfig string, log io.Writer) (*proc.Process, error) {
	return startComponent(ctx, assets, "kube-scheduler", dir, kubeconfig, log)
}

// startComponent starts a control-plane component that serves its health on a loopback port and authenticates
// with the member's admin kubeconfig (kube-controller-manager, kube-scheduler), and waits until /healthz answers.
func startComponent(ctx context.Context, assets, name, dir, kubeconfig string, log io.Writer, extra ...string) (*proc.Process, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(dir, name+"-certs"),
	}, extra...)
	p, err := proc.Start(log, name, filepath.Join(assets, name), args...)
	if err != nil {
		return nil, err
	}
	if err := p.WaitHTTP(ctx, insecureLoopback, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), time.Minute); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// insecureLoopback probes the health of kube-controller-manager and kube-scheduler, which serve self-signed
// certificates; it only checks liveness on loopback.
var insecureLoopback = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec
}}

// FreePort returns a loopback port that is free for both TCP and UDP right now, for servers the tests start
// (a DNS server needs both).
func FreePort() (int, error) { return freePortOn("127.0.0.1") }

// FreePorts returns n distinct ports as FreePort does, for a server that listens on several (DNS, ready,
// health, metrics).
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// handedOut holds the ports this process gave out, each with the file whose lock reserves it machine-wide until
// the process exits, so that no two servers started by any test process get the same port.
var handedOut = struct {
	sync.Mutex
	ports map[int]*os.File
}{ports: map[int]*os.File{}}

// lowestPort is the bottom of the range freePortOn draws from: below it are well-known and registered services.
const lowestPort = 10000

// portLocks is the folder of the per-port lock files, shared by every test process on the machine.
var portLocks = filepath.Join(os.TempDir(), "vksfleet-ports")

// freePortOn returns a port free for TCP and UDP on the given local address. It draws at random below the
// kernel's ephemeral range: a port from that range, free when asked, can be taken as the source port of any
// outgoing connection before the server that was given it binds (CI saw a controller fail with "address
// already in use" that way). The port stays reserved for this process, against the test processes that run
// beside it, until it exits: the kernel does not keep another process from drawing the same port before the
// server binds it, and CoreDNS, binding with SO_REUSEPORT, would then share it silently.
func freePortOn(host string) (int, error) {
	if err := os.MkdirAll(portLocks, 0o777); err != nil {
		return 0, fmt.Errorf("clusterset: the port locks folder: %w", err)
	}
	top := ephemeralLow()
	for range 200 {
		port := lowestPort + rand.IntN(top-lowestPort)
		if claim(port) {
			if bindable(host, port) {
				return port, nil
			}
			release(port)
		}
	}
	return 0, fmt.Errorf("no port below %d free for both TCP and UDP on %s after 200 tries", top, host)
}

// claim reserves port for this process, unless this or another test process holds it.
func claim(port int) bool {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports[port] != nil {
		return false
	}
	f, err := os.OpenFile(filepath.Join(portLocks, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	handedOut.ports[port] = f
	return true
}

// release gives back a claimed port that turned out to be in use by a process outside the tests.
func release(port int) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if f := handedOut.ports[port]; f != nil {
		f.Close() // closing the file drops its lock
		delete(handedOut.ports, port)
	}
}

// bindable reports whether port is free for both TCP and UDP on host.
func bindable(host string, port int) bool {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range (net.ipv4.ip_local_port_range), or Linux's
// default if it cannot be read or leaves no room below it.
func ephemeralLow() int {
	const linuxDefault = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return linuxDefault
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return linuxDefault
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil || low <= lowestPort+1000 {
		return linuxDefault
	}
	return low
}
