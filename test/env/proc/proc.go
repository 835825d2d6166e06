// Package proc starts the child processes of the local clusterset and fleet (kube-controller-manager, the
// mcs-controller, CoreDNS) so that none can outlive the process that started it.
package proc

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a running child process.
type Process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts bin with args. Its output goes to log, each line prefixed with "[name] " so that interleaved
// logs stay readable. The process gets SIGKILL if the starting process dies, even by SIGKILL itself.
func Start(log io.Writer, name, bin string, args ...string) (*Process, error) {
	return StartEnv(log, name, bin, nil, args...)
}

// StartEnv is Start with env (NAME=value) added to this process's environment.
func StartEnv(log io.Writer, name, bin string, env []string, args ...string) (*Process, error) {
	cmd := exec.Command(bin, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	w := PrefixWriter(log, name)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// WaitHTTP polls url with hc until it answers 200, failing early if the process exits, ctx ends or timeout
// passes.
func (p *Process) WaitHTTP(ctx context.Context, hc *http.Client, url string, timeout time.Duration) error {
	return p.Wait(ctx, timeout, "answering "+url, func() error {
		resp, err := hc.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s answered %s", url, resp.Status)
		}
		return nil
	})
}

// Wait calls ready every 100 ms until it returns nil, failing early if the process exits, ctx ends or timeout
// passes; what says what was waited for.
func (p *Process) Wait(ctx context.Context, timeout time.Duration, what string, ready func() error) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before %s: %v", p.name, what, p.cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if time.Now().After(deadline) {
				return fmt.Errorf("%s did not get to %s within %s: %w", p.name, what, timeout, err)
			}
		}
	}
}

// Stop sends SIGTERM, SIGKILL if the process has not exited ten seconds later, and waits for the exit.
func (p *Process) Stop() {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Kill sends SIGKILL, as a crash would end the process, and waits for the exit.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Signal sends sig to the process, such as SIGSTOP and SIGCONT to freeze and thaw it as a hung server. It fails
// once the process has exited (os.ErrProcessDone), rather than signal another process that got its pid.
func (p *Process) Signal(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signalling %s: %w", p.name, err)
	}
	return nil
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// PrefixWriter returns a writer to log that prefixes every complete line with "[name] ", as Start does to a
// process's output: for output that comes from elsewhere, such as a pod's log.
func PrefixWriter(log io.Writer, name string) io.Writer {
	return &prefixWriter{w: log, prefix: "[" + name + "] "}
}

// prefixWriter prefixes every complete line written through it.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := strings.IndexByte(string(p.buf), '\n')
		if i < 0 {
			return len(b), nil
		}
		if _, err := io.WriteString(p.w, p.prefix+string(p.buf[:i+1])); err != nil {
			return len(b), err
		}
		p.buf = p.buf[i+1:]
	}
}
