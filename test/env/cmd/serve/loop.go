package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

type loopConfig struct {
	target, proto     string
	names             []string // with proto dns, the names asked for, in turn
	interval, timeout time.Duration
	count             int           // 0: no limit
	duration          time.Duration // 0: no limit
}

// maxReply bounds what a request reads, in case the target is not a serve server.
const maxReply = 4 << 10

// loopResult is how one request ended: ok with who answered, or a failure reason.
type loopResult struct {
	cluster, pod string
	reason       string // empty when ok
	addr         string // where a failed request was sent, once its name was looked up
}

func splitTarget(target string) (host, port string, err error) {
	host, port, err = net.SplitHostPort(target)
	if err == nil && (host == "" || port == "") {
		err = fmt.Errorf("%q needs both a host and a port", target)
	}
	return host, port, err
}

// runLoop sends requests until cfg's bound or ctx ends and writes a line for each, then the summary.
func runLoop(ctx context.Context, cfg loopConfig, out io.Writer) {
	sent, ok := 0, 0
	defer func() { fmt.Fprintf(out, "summary sent=%d ok=%d failed=%d\n", sent, ok, sent-ok) }()
	var end <-chan time.Time
	if cfg.duration > 0 {
		t := time.NewTimer(cfg.duration)
		defer t.Stop()
		end = t.C
	}
	client := &http.Client{
		// New connections every time, so that each request goes through kube-proxy's choice again.
		Transport:     &http.Transport{DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	next := time.Now()
	for cfg.count == 0 || sent < cfg.count {
		if wait := time.Until(next); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-end:
				t.Stop()
				return
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		select {
		case <-end:
			return
		case <-ctx.Done():
			return
		default:
		}
		start := time.Now()
		next = start.Add(cfg.interval)
		sent++
		// Not tied to ctx: a request in flight at SIGTERM finishes (within the timeout) so the counts stay true.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.timeout)
		res := request(rctx, cfg, client, sent)
		cancel()
		latency := float64(time.Since(start).Microseconds()) / 1000
		if res.reason == "" {
			ok++
			fmt.Fprintf(out, "%d %d ok %s %s %.3f\n", sent, start.UnixMilli(), orDash(res.cluster), orDash(res.pod), latency)
		} else {
			fmt.Fprintf(out, "%d %d fail %s %.3f %s\n", sent, start.UnixMilli(), res.reason, latency, orDash(res.addr))
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func request(ctx context.Context, cfg loopConfig, client *http.Client, seq int) (res loopResult) {
	if cfg.proto == "dns" {
		return requestDNS(ctx, cfg.target, cfg.names[(seq-1)%len(cfg.names)])
	}
	host, port, _ := splitTarget(cfg.target) // checked with the flags
	if net.ParseIP(host) == nil {
		// The name is looked up here rather than by the dialer so that a lookup failure has its own reason, and a
		// lookup that took most of the time too: what times out after it is put down to it ("dns-slow").
		start := time.Now()
		addrs, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil || len(addrs) == 0 {
			return failure("dns", err)
		}
		host = addrs[0]
		if d, ok := ctx.Deadline(); ok && time.Since(start) > d.Sub(start)/2 {
			defer func() {
				if strings.HasSuffix(res.reason, "-timeout") {
					res.reason = "dns-slow"
				}
			}()
		}
	}
	addr := net.JoinHostPort(host, port)
	// A failure says where it was sent: a name can be answered differently from one request to the next.
	defer func() {
		if res.reason != "" {
			res.addr = addr
		}
	}()
	if cfg.proto == "http" {
		return requestHTTP(ctx, client, addr, cfg.target)
	}
	c, err := (&net.Dialer{}).DialContext(ctx, cfg.proto, addr)
	if err != nil {
		return failure("dial", err)
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		c.SetDeadline(d)
	}
	payload := "seq=" + strconv.Itoa(seq)
	if _, err := io.WriteString(c, payload+"\n"); err != nil {
		return failure("write", err)
	}
	var reply string
	if cfg.proto == "udp" {
		buf := make([]byte, maxReply)
		n, err := c.Read(buf)
		if err != nil {
			return failure("read", err)
		}
		reply = string(buf[:n])
	} else if reply, err = bufio.NewReader(io.LimitReader(c, maxReply)).ReadString('\n'); err != nil {
		return failure("read", err)
	}
	return parseReply(reply, payload)
}

func requestHTTP(ctx context.Context, client *http.Client, addr, target string) loopResult {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return failure("dial", err)
	}
	req.Host = target // what the service would see from a client that let the dialer resolve the name
	resp, err := client.Do(req)
	if err != nil {
		if opErr := (*net.OpError)(nil); errors.As(err, &opErr) && opErr.Op == "dial" {
			return failure("dial", err)
		}
		return failure("read", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReply))
	if err != nil {
		return failure("read", err)
	}
	if resp.StatusCode != http.StatusOK {
		return loopResult{reason: "http-" + strconv.Itoa(resp.StatusCode)}
	}
	return parseReply(string(body), "")
}

// failure names a failed step: "<step>-timeout" when it ran out of time, and for a refused connection or an
// unreachable address, "<step>-refused" or "<step>-unreachable": a rule that rejects (kube-proxy's, for a Service
// without endpoints) and a pod that is gone fail differently.
func failure(step string, err error) loopResult {
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.As(err, &netErr) && netErr.Timeout():
		return loopResult{reason: step + "-timeout"}
	case errors.Is(err, syscall.ECONNREFUSED):
		return loopResult{reason: step + "-refused"}
	case errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		return loopResult{reason: step + "-unreachable"}
	}
	return loopResult{reason: step}
}

// parseReply reads "cluster=C pod=P[ echo=E]\n"; wantEcho empty means no echo is expected.
func parseReply(reply, wantEcho string) loopResult {
	line, ok := strings.CutSuffix(reply, "\n")
	if !ok {
		return loopResult{reason: "bad-reply"}
	}
	clusterField, rest, _ := strings.Cut(line, " ")
	podField, echoField, hasEcho := strings.Cut(rest, " ")
	cluster, ok1 := strings.CutPrefix(clusterField, "cluster=")
	pod, ok2 := strings.CutPrefix(podField, "pod=")
	if !ok1 || !ok2 || hasEcho != (wantEcho != "") || hasEcho && echoField != "echo="+wantEcho {
		return loopResult{reason: "bad-reply"}
	}
	return loopResult{cluster: cluster, pod: pod}
}

// requestDNS asks server (host:port) once over UDP for the A records of name: ok with the name as the cluster field
// and the first address as the pod field, or the answer's rcode (nxdomain, servfail, rcode-N), nodata (NOERROR without an address), or a
// transport failure, as the reason. Unlike a stub resolver it does not retry, so that each question counts.
func requestDNS(ctx context.Context, server, name string) loopResult {
	q := new(dns.Msg).SetQuestion(dns.Fqdn(name), dns.TypeA)
	r, _, err := new(dns.Client).ExchangeContext(ctx, q, server)
	if err != nil {
		return failure("dns", err)
	}
	switch r.Rcode {
	case dns.RcodeSuccess:
	case dns.RcodeNameError:
		return loopResult{reason: "nxdomain"}
	case dns.RcodeServerFailure:
		return loopResult{reason: "servfail"}
	default:
		return loopResult{reason: "rcode-" + strconv.Itoa(r.Rcode)}
	}
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			return loopResult{cluster: name, pod: a.A.String()}
		}
	}
	return loopResult{reason: "nodata"}
}
