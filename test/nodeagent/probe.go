package nodeagent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probe runs p every period while ctx lasts and calls report when the result settles: true after
// successThreshold successes in a row, false after failureThreshold failures in a row. A nil probe reports
// nothing.
func (c *containerRun) probe(ctx context.Context, p *corev1.Probe, report func(ok bool)) {
	if p == nil {
		return
	}
	period := seconds(p.PeriodSeconds, 10)
	timeout := seconds(p.TimeoutSeconds, 1)
	needOK, needFail := int(max(p.SuccessThreshold, 1)), int(max(p.FailureThreshold, 1))
	if p.FailureThreshold == 0 {
		needFail = 3
	}
	wait := time.Duration(p.InitialDelaySeconds) * time.Second
	oks, fails := 0, 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = period
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := c.probeOnce(pctx, &p.ProbeHandler)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			oks, fails = oks+1, 0
			if oks == needOK {
				report(true)
			}
		} else {
			oks, fails = 0, fails+1
			if fails == needFail {
				report(false)
			}
		}
	}
}

func seconds(v, def int32) time.Duration {
	if v <= 0 {
		v = def
	}
	return time.Duration(v) * time.Second
}

// probeOnce runs one check: from the node for tcpSocket and httpGet, as the kubelet does, and inside the pod for
// exec.
func (c *containerRun) probeOnce(ctx context.Context, h *corev1.ProbeHandler) error {
	switch {
	case h.Exec != nil:
		if len(h.Exec.Command) == 0 {
			return fmt.Errorf("exec probe without a command")
		}
		cmd := c.pod.nsenter(c.spec.WorkingDir, h.Exec.Command)
		cmd.Env = c.env
		if err := cmd.Start(); err != nil {
			return err
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-done
			return ctx.Err()
		}
	case h.TCPSocket != nil:
		addr, err := c.probeAddr(h.TCPSocket.Host, h.TCPSocket.Port)
		if err != nil {
			return err
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return conn.Close()
	case h.HTTPGet != nil:
		g := h.HTTPGet
		addr, err := c.probeAddr(g.Host, g.Port)
		if err != nil {
			return err
		}
		scheme := "http"
		if g.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+g.Path, nil)
		if err != nil {
			return err
		}
		for _, hd := range g.HTTPHeaders {
			req.Header.Add(hd.Name, hd.Value)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("HTTP probe answered %d", resp.StatusCode)
		}
		return nil
	}
	return fmt.Errorf("probe has no handler this node agent supports (exec, tcpSocket, httpGet)")
}

// probeAddr resolves a probe's host (default: the pod's first address) and port (a number, or the name of a
// container port).
func (c *containerRun) probeAddr(host string, port intstr.IntOrString) (string, error) {
	if host == "" {
		host = c.pod.ips[0].String()
	}
	n := port.IntValue()
	if port.Type == intstr.String {
		n = 0
		for _, p := range c.spec.Ports {
			if p.Name == port.StrVal {
				n = int(p.ContainerPort)
			}
		}
	}
	if n <= 0 || n > 65535 {
		return "", fmt.Errorf("probe port %s is not a container port", port.String())
	}
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.String()
	}
	return net.JoinHostPort(host, strconv.Itoa(n)), nil
}
