package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"vksfleet.dev/fleet/test/env/poll"

	"github.com/miekg/dns"
)

// deadline bounds every network wait in these tests; nothing here should take nearly as long.
const deadline = 10 * time.Second

// syncBuffer is a log that the server writes while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type running struct {
	*server
	log  *syncBuffer
	stop context.CancelFunc
	done chan error // receives serve's result
}

// start runs a server for cluster c1, pod p1 with every listener on a port of the OS's choosing; setup may
// change the server before it serves.
func start(t *testing.T, setup ...func(*server)) *running {
	t.Helper()
	cfg, err := parseServerFlags([]string{"-cluster", "c1", "-pod", "p1",
		"-tcp", "127.0.0.1:0", "-udp", "127.0.0.1:0", "-http", "127.0.0.1:0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	s, err := newServer(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range setup {
		f(s)
	}
	ctx, stop := context.WithCancel(context.Background())
	r := &running{server: s, log: log, stop: stop, done: make(chan error, 1)}
	go func() { r.done <- s.serve(ctx) }()
	t.Cleanup(func() { r.wait(t) })
	return r
}

// wait stops the server and returns serve's result, failing t if it takes more than the grace period.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	r.stop()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup's call
		return err
	case <-time.After(shutdownGrace + deadline):
		t.Fatal("serve did not return after its context ended")
		return nil
	}
}

func dial(t *testing.T, network string, addr net.Addr) net.Conn {
	t.Helper()
	c, err := net.DialTimeout(network, addr.String(), deadline)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(deadline))
	t.Cleanup(func() { c.Close() })
	return c
}

func TestTCPEchoesEachLine(t *testing.T) {
	r := start(t)
	c := dial(t, "tcp", r.tcpAddr())
	lines := bufio.NewReader(c)
	for _, tc := range []struct{ send, want string }{
		{"hello\n", "cluster=c1 pod=p1 echo=hello\n"},
		{"two words\r\n", "cluster=c1 pod=p1 echo=two words\n"},
	} {
		if _, err := io.WriteString(c, tc.send); err != nil {
			t.Fatal(err)
		}
		if got, err := lines.ReadString('\n'); got != tc.want || err != nil {
			t.Errorf("after %q: got %q, %v; want %q", tc.send, got, err, tc.want)
		}
	}
}

func TestUDPAnswersEachDatagram(t *testing.T) {
	r := start(t)
	c := dial(t, "udp", r.udpAddr())
	buf := make([]byte, 1024)
	for _, send := range []string{"ping\n", "pong"} {
		if _, err := io.WriteString(c, send); err != nil {
			t.Fatal(err)
		}
		n, err := c.Read(buf)
		want := "cluster=c1 pod=p1 echo=" + strings.TrimSuffix(send, "\n") + "\n"
		if got := string(buf[:n]); got != want || err != nil {
			t.Errorf("after %q: got %q, %v; want %q", send, got, err, want)
		}
	}
}

func TestHTTP(t *testing.T) {
	r := start(t)
	client := &http.Client{Timeout: deadline}
	for _, tc := range []struct {
		path, body string
		status     int
	}{
		{"/", "cluster=c1 pod=p1\n", 200},
		{"/healthz", "ok\n", 200},
		{"/nope", "", 404},
	} {
		resp, err := client.Get("http://" + r.httpAddr().String() + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != tc.status || tc.body != "" && string(body) != tc.body {
			t.Errorf("GET %s = %d %q, want %d %q", tc.path, resp.StatusCode, body, tc.status, tc.body)
		}
		if got := resp.Header.Get("X-Served-By"); got != "c1/p1" {
			t.Errorf("GET %s: X-Served-By = %q, want c1/p1", tc.path, got)
		}
	}
}

// loopLines runs the loop with args and returns its request lines, split on spaces, and its summary.
func loopLines(t *testing.T, args ...string) ([][]string, string) {
	t.Helper()
	cfg, err := parseLoopFlags(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	runLoop(context.Background(), cfg, &out)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	var requests [][]string
	for i, line := range lines[:len(lines)-1] {
		f := strings.Split(line, " ")
		if f[0] != strconv.Itoa(i+1) || len(f) < 5 {
			t.Fatalf("line %q: want sequence number %d and at least 5 fields", line, i+1)
		}
		// The start, and the latency: last on an ok line, before the address on a fail line.
		latency := f[len(f)-1]
		if f[2] == "fail" {
			latency = f[4]
		}
		for _, n := range []string{f[1], latency} {
			if _, err := strconv.ParseFloat(n, 64); err != nil {
				t.Errorf("line %q: %q is not a number", line, n)
			}
		}
		requests = append(requests, f)
	}
	return requests, lines[len(lines)-1]
}

func TestLoopAgainstServer(t *testing.T) {
	r := start(t)
	for proto, addr := range map[string]net.Addr{"tcp": r.tcpAddr(), "udp": r.udpAddr(), "http": r.httpAddr()} {
		t.Run(proto, func(t *testing.T) {
			lines, summary := loopLines(t, "-target", addr.String(), "-proto", proto,
				"-count", "3", "-interval", "1ms", "-timeout", deadline.String())
			for _, f := range lines {
				if len(f) != 6 || f[2] != "ok" || f[3] != "c1" || f[4] != "p1" {
					t.Errorf("got %q, want an ok line from c1 p1", f)
				}
			}
			if len(lines) != 3 || summary != "summary sent=3 ok=3 failed=0" {
				t.Errorf("got %d lines and %q, want 3 and all ok", len(lines), summary)
			}
		})
	}
}

func TestLoopFailures(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	closedUDP, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedUDP.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts (in the kernel) but never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	unavailable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer unavailable.Close()
	stranger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "hello\n")
	}))
	defer stranger.Close()

	for _, tc := range []struct {
		name, target, proto, timeout, reason string
	}{
		{"closed port", closed.Addr().String(), "tcp", "2s", "dial-refused"},
		{"closed port http", closed.Addr().String(), "http", "2s", "dial-refused"},
		{"closed port udp", closedUDP.LocalAddr().String(), "udp", "2s", "read-refused"},
		{"no reply", silent.Addr().String(), "tcp", "100ms", "read-timeout"},
		{"503", unavailable.Listener.Addr().String(), "http", "2s", "http-503"},
		{"not serve", stranger.Listener.Addr().String(), "http", "2s", "bad-reply"},
		{"no such name", "no-such-host.invalid:80", "tcp", "2s", "dns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines, summary := loopLines(t, "-target", tc.target, "-proto", tc.proto,
				"-count", "3", "-interval", "0s", "-timeout", tc.timeout)
			// The address sent to, but for a name not found.
			addr := tc.target
			if tc.reason == "dns" {
				addr = "-"
			}
			for _, f := range lines {
				if len(f) != 6 || f[2] != "fail" || f[3] != tc.reason || f[5] != addr {
					t.Errorf("got %q, want a fail line for %s sent to %s", f, tc.reason, addr)
				}
			}
			if len(lines) != 3 || summary != "summary sent=3 ok=0 failed=3" {
				t.Errorf("got %d lines and %q, want 3 and all failed", len(lines), summary)
			}
		})
	}
}

func TestLoopStopsAfterDuration(t *testing.T) {
	r := start(t)
	began := time.Now()
	lines, summary := loopLines(t, "-target", r.tcpAddr().String(), "-duration", "200ms", "-interval", "50ms")
	if took := time.Since(began); took > deadline {
		t.Errorf("loop took %v, want about 200ms", took)
	}
	// Not an exact count: a slow machine may start fewer, but never more than one per interval.
	if n := len(lines); n < 1 || n > 5 || summary != fmt.Sprintf("summary sent=%d ok=%d failed=0", n, n) {
		t.Errorf("got %d lines and %q, want 1 to 5, all ok", n, summary)
	}
}

func TestLoopDoesNotBurst(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// Each request times out after 100ms, twice the interval: the next must wait for it and then start at once.
	lines, _ := loopLines(t, "-target", silent.Addr().String(), "-count", "3", "-interval", "50ms", "-timeout", "100ms")
	for i := 1; i < len(lines); i++ {
		prev, _ := strconv.ParseInt(lines[i-1][1], 10, 64)
		this, _ := strconv.ParseInt(lines[i][1], 10, 64)
		if this-prev < 100 {
			t.Errorf("request %d started %dms after the one before, which took 100ms", i+1, this-prev)
		}
	}
}

func TestLoopFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string // empty: valid
	}{
		{[]string{"-target", "h:1", "-count", "1"}, ""},
		{[]string{"-target", "h:1", "-duration", "24h"}, ""},
		{[]string{"-target", "h:1", "-count", "1000000", "-duration", "1s", "-proto", "http"}, ""},
		{[]string{"-target", "h:1"}, "unbounded"},
		{[]string{"-target", "h:1", "-count", "1000001"}, "over the limit"},
		{[]string{"-target", "h:1", "-duration", "25h"}, "over the limit"},
		{[]string{"-target", "h:1", "-count", "-1"}, "negative"},
		{[]string{"-count", "1"}, "-target is required"},
		{[]string{"-target", "h", "-count", "1"}, "-target"},
		{[]string{"-target", ":1", "-count", "1"}, "host and a port"},
		{[]string{"-target", "h:1", "-count", "1", "-proto", "sctp"}, "-proto"},
		{[]string{"-target", "h:1", "-count", "1", "-timeout", "0s"}, "-timeout"},
		{[]string{"-target", "h:1", "-count", "1", "extra"}, "unexpected arguments"},
	} {
		_, err := parseLoopFlags(tc.args, io.Discard)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("parseLoopFlags(%q) = %v, want error containing %q", tc.args, err, tc.err)
		}
	}
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"loop", "-target", "h:1"}, io.Discard, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "unbounded") {
		t.Errorf("serve loop without a bound: exit %d, stderr %q; want 1 and the reason", code, stderr.String())
	}
}

func TestServerFlags(t *testing.T) {
	t.Setenv("CLUSTER", "east")
	t.Setenv("POD_NAME", "web-0")
	cfg, err := parseServerFlags(nil, io.Discard)
	if err != nil || cfg != (serverConfig{cluster: "east", pod: "web-0", tcp: ":7000", udp: ":7000", http: ":8080"}) {
		t.Errorf("defaults = %+v, %v", cfg, err)
	}
	for _, args := range [][]string{
		{"-pod", "two words"},
		{"-tcp", "", "-udp", "", "-http", ""},
		{"-bogus"},
	} {
		if _, err := parseServerFlags(args, io.Discard); err == nil {
			t.Errorf("parseServerFlags(%q) accepted", args)
		}
	}
	// ":0" listens on every address; the port is the OS's choice.
	cfg, err = parseServerFlags([]string{"-tcp", ":0", "-udp", "", "-http", ""}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newServer(cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer s.closeListeners()
	port := s.tcpAddr().(*net.TCPAddr).Port
	if port == 0 || s.udpAddr() != nil || s.httpAddr() != nil {
		t.Errorf("listening on tcp %v, udp %v, http %v; want only tcp", s.tcpAddr(), s.udpAddr(), s.httpAddr())
	}
	c := dial(t, "tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	c.Close()
}

func TestRunExitCodes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the server still starts, then stops at once
	var stderr bytes.Buffer
	code := run(ctx, []string{"-cluster", "c1", "-pod", "p1", "-tcp", "127.0.0.1:0", "-udp", "127.0.0.1:0", "-http", ""}, io.Discard, &stderr)
	lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "serve: cluster=c1 pod=p1 tcp=127.0.0.1:") ||
		!strings.Contains(lines[0], "http=off") || !strings.HasPrefix(lines[1], "serve: stopped") {
		t.Errorf("serve stopped by its context: exit %d, stderr %q; want 0, a start and a stop line", code, lines)
	}
	if code := run(ctx, []string{"-tcp", "not an address"}, io.Discard, io.Discard); code != 1 {
		t.Errorf("serve on a bad address: exit %d, want 1", code)
	}
	if code := run(ctx, []string{"-h"}, io.Discard, io.Discard); code != 0 {
		t.Errorf("serve -h: exit %d, want 0", code)
	}
}

func TestShutdownIsGraceful(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	r := start(t, func(s *server) {
		// Holds the first request in its handler, so that it is in flight when shutdown begins.
		handler := s.httpSrv.Handler
		var once sync.Once
		s.httpSrv.Handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			once.Do(func() { close(entered); <-release })
			handler.ServeHTTP(w, req)
		})
	})
	idle := dial(t, "tcp", r.tcpAddr())
	lines := bufio.NewReader(idle)
	io.WriteString(idle, "first\n")
	if _, err := lines.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	inFlight := dial(t, "tcp", r.httpAddr())
	io.WriteString(inFlight, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case <-entered:
	case <-time.After(deadline):
		t.Fatal("HTTP request did not reach its handler")
	}

	r.stop()
	poll.T(t, deadline, "listeners closed", func() error {
		for _, a := range []net.Addr{r.tcpAddr(), r.httpAddr()} {
			if c, err := net.DialTimeout("tcp", a.String(), deadline); err == nil {
				c.Close()
				return errors.New(a.String() + " still accepts")
			}
		}
		return nil
	})
	if _, err := lines.ReadString('\n'); err == nil {
		t.Error("idle TCP connection still open during shutdown")
	}
	select {
	case err := <-r.done:
		t.Fatalf("serve returned %v with a request in flight", err)
	default:
	}
	close(release)
	resp, err := http.ReadResponse(bufio.NewReader(inFlight), nil)
	if err != nil {
		t.Fatalf("in-flight request: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("in-flight request: %s, want 200", resp.Status)
	}
	if err := r.wait(t); err != nil {
		t.Errorf("serve = %v, want nil", err)
	}
	if log := r.log.String(); !strings.Contains(log, "serve: cluster=c1 pod=p1 tcp=") || !strings.Contains(log, "serve: stopped") {
		t.Errorf("log %q, want a start and a stop line", log)
	}
}

func TestParseReply(t *testing.T) {
	for _, tc := range []struct {
		reply, echo string
		want        loopResult
	}{
		{"cluster=c pod=p\n", "", loopResult{cluster: "c", pod: "p"}},
		{"cluster= pod=p echo=seq=1\n", "seq=1", loopResult{pod: "p"}},
		{"cluster=c pod=p echo=seq=2\n", "seq=1", loopResult{reason: "bad-reply"}},
		{"cluster=c pod=p\n", "seq=1", loopResult{reason: "bad-reply"}},
		{"cluster=c pod=p", "", loopResult{reason: "bad-reply"}},
		{"hello\n", "", loopResult{reason: "bad-reply"}},
	} {
		if got := parseReply(tc.reply, tc.echo); got != tc.want {
			t.Errorf("parseReply(%q, %q) = %+v, want %+v", tc.reply, tc.echo, got, tc.want)
		}
	}
}

func TestLoopDNS(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		r := new(dns.Msg).SetReply(q)
		switch q.Question[0].Name {
		case "web.example.":
			r.Answer = append(r.Answer, &dns.A{Hdr: dns.RR_Header{Name: "web.example.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5},
				A: net.ParseIP("192.0.2.7")})
		case "empty.example.":
		case "broken.example.":
			r.Rcode = dns.RcodeServerFailure
		case "refused.example.":
			r.Rcode = dns.RcodeRefused
		case "silent.example.":
			return
		default:
			r.Rcode = dns.RcodeNameError
		}
		w.WriteMsg(r)
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	for _, tc := range []struct{ name, want string }{
		{"web.example", "ok 192.0.2.7"},
		{"gone.example", "fail nxdomain"},
		{"empty.example", "fail nodata"},
		{"broken.example", "fail servfail"},
		{"refused.example", "fail rcode-5"},
		{"silent.example", "fail dns-timeout"},
	} {
		lines, _ := loopLines(t, "-target", pc.LocalAddr().String(), "-proto", "dns", "-name", tc.name,
			"-count", "2", "-interval", "0s", "-timeout", "200ms")
		for _, f := range lines {
			got := f[2] + " " + f[3]
			if f[2] == "ok" {
				got = f[2] + " " + f[4]
			}
			if got != tc.want {
				t.Errorf("%s: got %q, want %q", tc.name, f, tc.want)
			}
		}
	}
	// Several names are asked in turn, each answer naming its question.
	lines, _ := loopLines(t, "-target", pc.LocalAddr().String(), "-proto", "dns", "-name", "web.example,gone.example",
		"-count", "3", "-interval", "0s", "-timeout", "200ms")
	var got []string
	for _, f := range lines {
		end := len(f) - 1 // the latency
		if f[2] == "fail" {
			end = 4 // the latency, then the address
		}
		got = append(got, strings.Join(f[2:end], " "))
	}
	if want := []string{"ok web.example 192.0.2.7", "fail nxdomain", "ok web.example 192.0.2.7"}; !slices.Equal(got, want) {
		t.Errorf("two names in turn: got %q, want %q", got, want)
	}
	for _, args := range [][]string{{"-proto", "dns"}, {"-name", "web.example"}, {"-proto", "dns", "-name", "a.example,,b.example"}} {
		if _, err := parseLoopFlags(append([]string{"-target", "h:53", "-count", "1"}, args...), io.Discard); err == nil {
			t.Errorf("parseLoopFlags(%q) accepted -name without -proto dns, the other way round, or an empty name", args)
		}
	}
}
