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
	"sync"
	"sync/atomic"
	"time"
)

// shutdownGrace bounds how long requests in flight may hold up exit; pods are killed soon after SIGTERM anyway.
const shutdownGrace = 5 * time.Second

type serverConfig struct {
	cluster, pod   string
	tcp, udp, http string // listen addresses; empty turns the listener off
}

// server holds its listeners from the start so that tests can listen on port 0 and learn the ports.
type server struct {
	ident string // identity line without its newline
	log   io.Writer

	tcp     net.Listener   // nil when off
	udp     net.PacketConn // nil when off
	httpL   net.Listener   // nil when off
	httpSrv *http.Server

	stopping atomic.Bool // set before listeners close, so their errors are expected
	mu       sync.Mutex
	conns    map[net.Conn]struct{} // open TCP echo connections, to cut idle ones short on shutdown
	connsWG  sync.WaitGroup
}

func newServer(cfg serverConfig, log io.Writer) (_ *server, err error) {
	s := &server{
		ident: fmt.Sprintf("cluster=%s pod=%s", cfg.cluster, cfg.pod),
		log:   log,
		conns: map[net.Conn]struct{}{},
	}
	defer func() {
		if err != nil {
			s.closeListeners()
		}
	}()
	if cfg.tcp != "" {
		if s.tcp, err = net.Listen("tcp", cfg.tcp); err != nil {
			return nil, err
		}
	}
	if cfg.udp != "" {
		if s.udp, err = net.ListenPacket("udp", cfg.udp); err != nil {
			return nil, err
		}
	}
	if cfg.http != "" {
		if s.httpL, err = net.Listen("tcp", cfg.http); err != nil {
			return nil, err
		}
	}
	servedBy := cfg.cluster + "/" + cfg.pod
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, s.ident+"\n") })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	s.httpSrv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Served-By", servedBy)
			mux.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	return s, nil
}

func (s *server) closeListeners() {
	for _, c := range []io.Closer{s.tcp, s.udp, s.httpL} {
		if c != nil {
			c.Close()
		}
	}
}

// tcpAddr, udpAddr and httpAddr are the bound addresses, nil for a listener that is off.
func (s *server) tcpAddr() net.Addr {
	if s.tcp == nil {
		return nil
	}
	return s.tcp.Addr()
}

func (s *server) udpAddr() net.Addr {
	if s.udp == nil {
		return nil
	}
	return s.udp.LocalAddr()
}

func (s *server) httpAddr() net.Addr {
	if s.httpL == nil {
		return nil
	}
	return s.httpL.Addr()
}

func show(a net.Addr) string {
	if a == nil {
		return "off"
	}
	return a.String()
}

// serve serves until ctx ends and then shuts down gracefully, or until a listener fails, which it returns.
func (s *server) serve(ctx context.Context) error {
	fmt.Fprintf(s.log, "serve: %s tcp=%s udp=%s http=%s\n", s.ident,
		show(s.tcpAddr()), show(s.udpAddr()), show(s.httpAddr()))
	errc := make(chan error, 3)
	var wg sync.WaitGroup
	if s.tcp != nil {
		wg.Go(func() { errc <- s.acceptTCP() })
	}
	if s.udp != nil {
		wg.Go(func() { errc <- s.serveUDP() })
	}
	if s.httpL != nil {
		wg.Go(func() {
			err := s.httpSrv.Serve(s.httpL)
			if s.stopping.Load() || errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			if err != nil {
				err = fmt.Errorf("http: %w", err)
			}
			errc <- err
		})
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	s.shutdown()
	wg.Wait()
	if err != nil {
		fmt.Fprintf(s.log, "serve: stopped: %v\n", err)
		return err
	}
	fmt.Fprintf(s.log, "serve: stopped: %v\n", context.Cause(ctx))
	return nil
}

func (s *server) shutdown() {
	s.stopping.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	var wg sync.WaitGroup
	if s.httpL != nil {
		wg.Go(func() {
			if s.httpSrv.Shutdown(ctx) != nil {
				s.httpSrv.Close()
			}
		})
	}
	if s.udp != nil {
		s.udp.Close() // a UDP reply is sent as soon as its datagram is read, so nothing is in flight
	}
	if s.tcp != nil {
		s.tcp.Close()
		deadline, _ := ctx.Deadline()
		s.mu.Lock()
		for c := range s.conns {
			drain(c, deadline)
		}
		s.mu.Unlock()
		s.connsWG.Wait()
	}
	wg.Wait()
}

// drain ends c's wait for another line at once but gives the reply to the line already read until deadline.
func drain(c net.Conn, deadline time.Time) {
	c.SetReadDeadline(time.Now())
	c.SetWriteDeadline(deadline)
}

func (s *server) acceptTCP() error {
	backoff := 5 * time.Millisecond
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			if s.stopping.Load() {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("tcp: %w", err)
			}
			// Such as running out of file descriptors: wait for connections to close rather than spin.
			fmt.Fprintf(s.log, "serve: tcp accept: %v\n", err)
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		s.mu.Lock()
		if s.stopping.Load() {
			// Accepted just before the listener closed, after shutdown swept the connections.
			drain(c, time.Now().Add(shutdownGrace))
		}
		s.conns[c] = struct{}{}
		s.connsWG.Add(1)
		s.mu.Unlock()
		go s.echoTCP(c)
	}
}

func (s *server) echoTCP(c net.Conn) {
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.connsWG.Done()
	}()
	lines := bufio.NewScanner(c)
	for lines.Scan() {
		if _, err := fmt.Fprintf(c, "%s echo=%s\n", s.ident, lines.Bytes()); err != nil {
			return
		}
	}
}

func (s *server) serveUDP() error {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := s.udp.ReadFrom(buf)
		if err != nil {
			if s.stopping.Load() {
				return nil
			}
			return fmt.Errorf("udp: %w", err)
		}
		payload := bytes.TrimSuffix(bytes.TrimSuffix(buf[:n], []byte("\n")), []byte("\r"))
		reply := fmt.Appendf(nil, "%s echo=%s\n", s.ident, payload)
		if _, err := s.udp.WriteTo(reply, from); err != nil && !s.stopping.Load() {
			fmt.Fprintf(s.log, "serve: udp reply to %v: %v\n", from, err)
		}
	}
}
