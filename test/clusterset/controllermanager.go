package clusterset

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"vksfleet.dev/fleet/test/proc"
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

// startControllerManager starts kube-controller-manager and waits until its /healthz answers. For a member with
// kubelet nodes, rootCAFile is the API server's serving CA: kubeletControllers run too, and publish it.
func startControllerManager(ctx context.Context, assets, dir, kubeconfig, rootCAFile string, log io.Writer) (*proc.Process, error) {
	ctrls := controllers
	var extra []string
	if rootCAFile != "" {
		ctrls = append(slices.Clip(controllers), kubeletControllers...)
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
// health, metrics): ports asked for one by one may repeat.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for len(ports) < n {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		if !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// freePortOn returns a port free for TCP and UDP on the given local address.
func freePortOn(host string) (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort(host, strconv.Itoa(port)))
		l.Close()
		if err == nil {
			u.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("no port free for both TCP and UDP on %s after 50 tries", host)
}
