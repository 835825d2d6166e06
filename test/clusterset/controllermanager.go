package clusterset

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// controllers are the kube-controller-manager controllers a member runs: enough for Deployments and
// StatefulSets to get pods, for pods to land in EndpointSlices, and for namespaces and owned objects to go away.
var controllers = []string{
	"endpointslice", "endpointslicemirroring", "namespace", "garbagecollector",
	"deployment", "replicaset", "statefulset",
}

// controllerManager is a running kube-controller-manager process.
type controllerManager struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startControllerManager(ctx context.Context, assets, dir, kubeconfig string, log io.Writer) (*controllerManager, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(assets, "kube-controller-manager"),
		"--kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig,
		"--authorization-kubeconfig="+kubeconfig,
		"--controllers="+strings.Join(controllers, ","),
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--cert-dir="+filepath.Join(dir, "kcm-certs"),
		// Objects arrive by the thousand in benchmarks; the default 20 QPS would make kcm the bottleneck.
		"--kube-api-qps=1000",
		"--kube-api-burst=2000",
		"--concurrent-service-endpoint-syncs=10",
		"--concurrent-gc-syncs=40",
	)
	cmd.Stdout, cmd.Stderr = log, log
	// Pdeathsig ends kcm with the process that started it, even if that one is killed outright.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	m := &controllerManager{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(m.done) }()
	if err := m.waitHealthy(ctx, port); err != nil {
		return nil, errors.Join(err, m.stop())
	}
	return m, nil
}

// waitHealthy polls kcm's /healthz until it answers 200, the process exits, or a minute passes.
func (m *controllerManager) waitHealthy(ctx context.Context, port int) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		// kcm serves a self-signed certificate; this probe only checks liveness on loopback.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec
	}}
	url := fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if resp, err := hc.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-m.done:
			return fmt.Errorf("kube-controller-manager exited during start: %v", m.cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if time.Now().After(deadline) {
				return fmt.Errorf("kube-controller-manager not healthy at %s after a minute", url)
			}
		}
	}
}

// stop sends SIGTERM, and SIGKILL if kcm has not exited ten seconds later, then waits for it.
func (m *controllerManager) stop() error {
	select {
	case <-m.done:
		return nil
	default:
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
	return nil
}

// FreePort returns a loopback port that is free for both TCP and UDP right now, for servers the tests start
// (a DNS server needs both).
func FreePort() (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		l.Close()
		if err == nil {
			u.Close()
			return port, nil
		}
	}
	return 0, errors.New("no loopback port free for both TCP and UDP after 50 tries")
}
