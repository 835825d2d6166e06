// Package kubeletserver serves the part of the kubelet's HTTPS API that the
// kube-apiserver proxies to nodes for `kubectl exec` and `kubectl logs`, so
// that the test node agent, which runs pods as plain processes, can answer
// those requests exactly as a real kubelet would.
package kubeletserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// ErrNotFound is what a Runtime wraps for an unknown pod, container or log
// file, so that the server answers 404 like the kubelet instead of 500.
var ErrNotFound = errors.New("not found")

// Runtime is what the node agent provides: the server only translates HTTP
// and the streaming protocols into these calls.
type Runtime interface {
	// CheckExec is called before the connection is upgraded, because only
	// then can an unknown pod or container (ErrNotFound, answered 404) or a
	// container that cannot run commands (any other error, answered 500)
	// still reach kubectl as a plain HTTP error.
	CheckExec(namespace, pod, container string) error

	// Exec runs cmd in the container's pod and returns once it has exited.
	// The streams of the options that were not requested are nil; stdout
	// and stderr must not be used after Exec returns. A non-zero exit is
	// reported with ExitError (or any error wrapping a
	// k8s.io/utils/exec.ExitError), which kubectl turns into its own exit
	// code; any other error reaches kubectl as an internal error. resize is
	// nil without a tty and delivers the client's terminal sizes otherwise.
	// ctx ends when the server stops; a client that goes away shows instead
	// as stdin ending and writes to stdout or stderr failing.
	Exec(ctx context.Context, namespace, pod, container string, cmd []string, stdin io.Reader, stdout, stderr io.WriteCloser, tty bool, resize <-chan TerminalSize) error

	// LogFile returns the path of the container's CRI-format log file (as
	// written by a LogWriter) of its current run, or of the run before it
	// when previous is true. Errors wrapping ErrNotFound are answered 404.
	LogFile(namespace, pod, container string, previous bool) (string, error)
}

// Options tunes a Server; the zero value gives the kubelet's defaults.
type Options struct {
	// StreamIdleTimeout closes exec sessions without traffic for this
	// long; the kubelet's --streaming-connection-idle-timeout default is
	// 4h.
	StreamIdleTimeout time.Duration
	// StreamCreationTimeout bounds how long a SPDY client may take to open
	// its streams after the upgrade; default 30s.
	StreamCreationTimeout time.Duration
}

// Server is the node agent's stand-in for the kubelet server. It is an
// http.Handler so that it can also be mounted elsewhere or tested without
// TLS.
type Server struct {
	rt   Runtime
	opts Options
	mux  *http.ServeMux
}

// New returns a Server answering for rt.
func New(rt Runtime, opts Options) *Server {
	if opts.StreamIdleTimeout == 0 {
		opts.StreamIdleTimeout = 4 * time.Hour
	}
	if opts.StreamCreationTimeout == 0 {
		opts.StreamCreationTimeout = remotecommand.DefaultStreamCreationTimeout
	}
	s := &Server{rt: rt, opts: opts, mux: http.NewServeMux()}
	// The kube-apiserver uses POST for SPDY upgrades and GET for
	// WebSockets, so exec takes both, as the kubelet does.
	s.mux.HandleFunc("GET /exec/{ns}/{pod}/{container}", s.serveExec)
	s.mux.HandleFunc("POST /exec/{ns}/{pod}/{container}", s.serveExec)
	s.mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", s.serveContainerLogs)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})
	return s
}

// ServeHTTP routes the kubelet paths; anything else is 404.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

// ListenAndServeTLS listens on addr (host:port, e.g. the node's InternalIP
// and its kubeletEndpoint port) and serves like ServeTLS.
func (s *Server) ListenAndServeTLS(ctx context.Context, addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.ServeTLS(ctx, l)
}

// ServeTLS serves HTTPS on l until ctx ends, then returns nil. The
// certificate is self-signed and made anew, which is enough because the
// kube-apiserver skips verifying kubelets when it has no kubelet CA. Every
// request's context ends with ctx, so exec sessions and log followers stop
// with the server.
func (s *Server) ServeTLS(ctx context.Context, l net.Listener) error {
	cert, err := selfSignedCert(l.Addr())
	if err != nil {
		_ = l.Close()
		return err
	}
	srv := &http.Server{
		Handler:           s,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(l, "", "") }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// Handlers see ctx end too, so waiting for them is short; Shutdown
	// neither waits for nor closes upgraded exec connections, whose
	// handlers end when the Runtime's Exec honours ctx.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	<-served
	return nil
}

// selfSignedCert names the listen IP, or the loopback addresses when
// listening on all of them, since that is how clients reach the server.
func selfSignedCert(addr net.Addr) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	if tcp, ok := addr.(*net.TCPAddr); ok && !tcp.IP.IsUnspecified() {
		ips = []net.IP{tcp.IP}
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kubeletserver"},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: ips,
		DNSNames:    []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("self-signing the serving certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// writeRuntimeError answers with the status the kubelet gives for the same
// failure.
func writeRuntimeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	if errors.Is(err, ErrNotFound) {
		code = http.StatusNotFound
	}
	http.Error(w, err.Error(), code)
}
