package kubeletserver

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	clientexec "k8s.io/client-go/util/exec"
)

// fakeRuntime has one pod, default/pod, with one container, main, whose
// commands are the first word of cmd.
type fakeRuntime struct {
	logs map[string]string // "container" or "container/previous" -> path
}

func (f *fakeRuntime) lookup(namespace, pod, container string) error {
	if namespace != "default" || pod != "pod" || container != "main" {
		return fmt.Errorf("container %s/%s/%s: %w", namespace, pod, container, ErrNotFound)
	}
	return nil
}

func (f *fakeRuntime) CheckExec(namespace, pod, container string) error {
	return f.lookup(namespace, pod, container)
}

func (f *fakeRuntime) Exec(ctx context.Context, namespace, pod, container string, cmd []string, stdin io.Reader, stdout, stderr io.WriteCloser, tty bool, resize <-chan TerminalSize) error {
	if err := f.lookup(namespace, pod, container); err != nil {
		return err
	}
	switch cmd[0] {
	case "cat": // echoes stdin until the client closes it
		n, err := io.Copy(stdout, stdin)
		fmt.Fprintf(stderr, "copied %d bytes\n", n)
		return err
	case "exit": // exit CODE, with the error wrapped as an agent might
		fmt.Fprintf(stdout, "args=%q stdin=%t\n", cmd[1:], stdin != nil)
		fmt.Fprintln(stderr, "exiting")
		code, err := strconv.Atoi(cmd[1])
		if err != nil || code == 0 {
			return err
		}
		return fmt.Errorf("process %d: %w", 42, ExitError(code))
	case "fail":
		return errors.New("runtime exploded")
	case "tty": // reports the first terminal size
		select {
		case size := <-resize:
			fmt.Fprintf(stdout, "tty=%t stderr=%t %dx%d", tty, stderr != nil, size.Width, size.Height)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return fmt.Errorf("unknown command %q", cmd)
}

func (f *fakeRuntime) LogFile(namespace, pod, container string, previous bool) (string, error) {
	key := container
	if previous {
		key += "/previous"
	}
	if path, ok := f.logs[key]; ok && namespace == "default" && pod == "pod" {
		return path, nil
	}
	return "", fmt.Errorf("no log for %s/%s/%s: %w", namespace, pod, key, ErrNotFound)
}

type testServer struct {
	base   string
	config *rest.Config
	client *http.Client
	stop   func() // stops the server and checks that it did
}

func startServer(t *testing.T, rt Runtime) *testServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- New(rt, Options{}).ServeTLS(ctx, l) }()
	transport := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	ts := &testServer{
		base:   "https://" + l.Addr().String(),
		client: &http.Client{Transport: transport},
		stop: sync.OnceFunc(func() {
			cancel()
			select {
			case err := <-served:
				if err != nil {
					t.Errorf("ServeTLS: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("ServeTLS did not return after its context ended")
			}
		}),
	}
	ts.config = &rest.Config{Host: ts.base, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	t.Cleanup(func() {
		ts.stop()
		transport.CloseIdleConnections()
	})
	return ts
}

// get returns the status and body of a GET on path.
func (ts *testServer) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := ts.client.Get(ts.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

type executorFactory func(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error)

// executors are the two transports kubectl and the kube-apiserver use.
var executors = map[string]executorFactory{
	"SPDY": func(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error) {
		return remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	},
	"WebSocket": func(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error) {
		return remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, u.String())
	},
}

// runExec runs cmd in default/pod/main and returns its output and error.
func runExec(t *testing.T, ts *testServer, newExecutor executorFactory, cmd []string, opts remotecommand.StreamOptions) (stdout, stderr string, err error) {
	t.Helper()
	q := url.Values{"command": cmd}
	for param, on := range map[string]bool{"input": opts.Stdin != nil, "output": true, "error": !opts.Tty, "tty": opts.Tty} {
		if on {
			q.Set(param, "1")
		}
	}
	u, err := url.Parse(ts.base + "/exec/default/pod/main?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	ex, err := newExecutor(ts.config, u)
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	opts.Stdout = &out
	if !opts.Tty {
		opts.Stderr = &errOut
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = ex.StreamWithContext(ctx, opts)
	return out.String(), errOut.String(), err
}

// oneSize reports a single terminal size, then that there are no more.
type oneSize struct{ sent bool }

func (q *oneSize) Next() *remotecommand.TerminalSize {
	if q.sent {
		return nil
	}
	q.sent = true
	return &remotecommand.TerminalSize{Width: 132, Height: 43}
}

func TestExec(t *testing.T) {
	ts := startServer(t, &fakeRuntime{})
	for name, newExecutor := range executors {
		t.Run(name, func(t *testing.T) {
			t.Run("stdin echoed until closed", func(t *testing.T) {
				in := strings.Repeat("hello world\n", 10000)
				stdout, stderr, err := runExec(t, ts, newExecutor, []string{"cat"}, remotecommand.StreamOptions{Stdin: strings.NewReader(in)})
				if err != nil {
					t.Fatal(err)
				}
				if stdout != in {
					t.Errorf("stdout has %d bytes, want the %d sent", len(stdout), len(in))
				}
				if want := fmt.Sprintf("copied %d bytes\n", len(in)); stderr != want {
					t.Errorf("stderr = %q, want %q", stderr, want)
				}
			})
			t.Run("success", func(t *testing.T) {
				stdout, stderr, err := runExec(t, ts, newExecutor, []string{"exit", "0", "two words"}, remotecommand.StreamOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if want := `args=["0" "two words"] stdin=false` + "\n"; stdout != want {
					t.Errorf("stdout = %q, want %q", stdout, want)
				}
				if stderr != "exiting\n" {
					t.Errorf("stderr = %q", stderr)
				}
			})
			t.Run("exit code", func(t *testing.T) {
				stdout, stderr, err := runExec(t, ts, newExecutor, []string{"exit", "3"}, remotecommand.StreamOptions{})
				var exitErr clientexec.CodeExitError
				if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 3 {
					t.Fatalf("err = %#v, want a CodeExitError with code 3", err)
				}
				if !strings.HasPrefix(stdout, "args=") || stderr != "exiting\n" {
					t.Errorf("output before the exit was lost: stdout %q, stderr %q", stdout, stderr)
				}
			})
			t.Run("runtime error", func(t *testing.T) {
				_, _, err := runExec(t, ts, newExecutor, []string{"fail"}, remotecommand.StreamOptions{})
				if err == nil || !strings.Contains(err.Error(), "runtime exploded") {
					t.Fatalf("err = %v, want the runtime's error", err)
				}
				if errors.As(err, new(clientexec.CodeExitError)) {
					t.Errorf("a runtime error came back as an exit code: %v", err)
				}
			})
			t.Run("tty with resize", func(t *testing.T) {
				stdout, _, err := runExec(t, ts, newExecutor, []string{"tty"}, remotecommand.StreamOptions{Tty: true, TerminalSizeQueue: &oneSize{}})
				if err != nil {
					t.Fatal(err)
				}
				if want := "tty=true stderr=false 132x43"; stdout != want {
					t.Errorf("stdout = %q, want %q", stdout, want)
				}
			})
		})
	}
}

// TestExecWebSocketV4 covers the pre-v5 WebSocket protocol that the
// streaming library serves itself; it cannot signal the end of stdin.
func TestExecWebSocketV4(t *testing.T) {
	ts := startServer(t, &fakeRuntime{})
	v4 := func(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error) {
		return remotecommand.NewWebSocketExecutorForProtocols(cfg, http.MethodGet, u.String(), "v4.channel.k8s.io")
	}
	stdout, stderr, err := runExec(t, ts, v4, []string{"exit", "7"}, remotecommand.StreamOptions{})
	var exitErr clientexec.CodeExitError
	if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 7 {
		t.Fatalf("err = %#v, want a CodeExitError with code 7", err)
	}
	if want := `args=["7"] stdin=false` + "\n"; stdout != want || stderr != "exiting\n" {
		t.Errorf("stdout %q, stderr %q; want %q and %q", stdout, stderr, want, "exiting\n")
	}
}

func TestExecUnknownContainer(t *testing.T) {
	ts := startServer(t, &fakeRuntime{})
	for name, newExecutor := range executors {
		t.Run(name, func(t *testing.T) {
			u, err := url.Parse(ts.base + "/exec/default/pod/sidecar?command=true&output=1")
			if err != nil {
				t.Fatal(err)
			}
			ex, err := newExecutor(ts.config, u)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard}); err == nil {
				t.Fatal("exec in an unknown container succeeded")
			}
		})
	}
}

func TestHTTPErrors(t *testing.T) {
	ts := startServer(t, &fakeRuntime{})
	for _, tc := range []struct {
		path     string
		status   int
		contains string
	}{
		{"/healthz", http.StatusOK, "ok"},
		{"/nope", http.StatusNotFound, ""},
		{"/exec/default/pod", http.StatusNotFound, ""},
		{"/exec/default/ghost/main?command=ls&output=1", http.StatusNotFound, "default/ghost/main: not found"},
		{"/exec/default/pod/main?output=1", http.StatusBadRequest, "missing command"},
		{"/exec/default/pod/main?command=ls", http.StatusBadRequest, "at least 1 of stdin, stdout, stderr"},
		{"/containerLogs/default/pod/sidecar", http.StatusNotFound, "not found"},
		{"/containerLogs/default/pod/main?tailLines=-1", http.StatusBadRequest, "tailLines must be at least 0"},
		{"/containerLogs/default/pod/main?sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z", http.StatusBadRequest, "mutually exclusive"},
		{"/containerLogs/default/pod/main?follow=maybe", http.StatusBadRequest, "invalid syntax"},
		{"/containerLogs/default/pod/main?stream=Both", http.StatusBadRequest, "invalid stream"},
	} {
		status, body := ts.get(t, tc.path)
		if status != tc.status || !strings.Contains(body, tc.contains) {
			t.Errorf("GET %s = %d %q, want %d containing %q", tc.path, status, body, tc.status, tc.contains)
		}
	}
}

func TestCertificate(t *testing.T) {
	ts := startServer(t, &fakeRuntime{})
	conn, err := tls.Dial("tcp", strings.TrimPrefix(ts.base, "https://"), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cert := conn.ConnectionState().PeerCertificates[0]
	if _, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Errorf("key is %T, want ECDSA", cert.PublicKey)
	}
	if err := cert.VerifyHostname("127.0.0.1"); err != nil {
		t.Errorf("certificate does not name the listen IP: %v", err)
	}
}
