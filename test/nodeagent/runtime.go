package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"

	"vksfleet.dev/fleet/test/nodeagent/kubeletserver"
)

// The agent is the runtime behind its exec and logs server.
var _ kubeletserver.Runtime = (*Agent)(nil)

// container returns a container of a pod running on this node.
func (a *Agent) container(namespace, pod, name string) (*containerRun, error) {
	r, err := a.lookup(namespace, pod)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", kubeletserver.ErrNotFound, err)
	}
	for _, c := range r.containers {
		if c.spec.Name == name {
			return c, nil
		}
	}
	return nil, fmt.Errorf("%w: container %q is not in pod %s/%s", kubeletserver.ErrNotFound, name, namespace, pod)
}

// CheckExec reports whether a command can run in the container now: it must be running.
func (a *Agent) CheckExec(namespace, pod, container string) error {
	c, err := a.container(namespace, pod, container)
	if err != nil {
		return err
	}
	c.pod.mu.Lock()
	defer c.pod.mu.Unlock()
	if c.state.Running == nil {
		return fmt.Errorf("container %q of pod %s/%s is not running", container, namespace, pod)
	}
	return nil
}

// Exec runs cmd inside the pod's namespaces with the container's environment, as `kubectl exec` does.
func (a *Agent) Exec(ctx context.Context, namespace, pod, container string, cmd []string, stdin io.Reader, stdout, stderr io.WriteCloser, tty bool, _ <-chan kubeletserver.TerminalSize) error {
	if tty {
		return errors.New("the local clusterset's node agent does not allocate terminals: run kubectl exec without -t")
	}
	if len(cmd) == 0 {
		return errors.New("no command given")
	}
	if err := a.CheckExec(namespace, pod, container); err != nil {
		return err
	}
	c, _ := a.container(namespace, pod, container)
	path, err := exec.LookPath(cmd[0])
	if err != nil {
		if stderr != nil {
			fmt.Fprintf(stderr, "%v\n", err)
		}
		return kubeletserver.ExitError(127)
	}
	x := c.pod.nsenter(c.spec.WorkingDir, append([]string{path}, cmd[1:]...))
	x.Env = c.env
	if stdin != nil {
		x.Stdin = stdin
	}
	if stdout != nil {
		x.Stdout = stdout
	}
	if stderr != nil {
		x.Stderr = stderr
	}
	if err := x.Start(); err != nil {
		return err
	}
	// The client going away ends the command and whatever it forked.
	stop := context.AfterFunc(ctx, func() { _ = syscall.Kill(-x.Process.Pid, syscall.SIGKILL) })
	defer stop()
	err = x.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code := ee.ExitCode()
		if code < 0 {
			code = 137
		}
		return kubeletserver.ExitError(code)
	}
	return err
}

// LogFile returns the log of the container's current run, or of the run before it.
func (a *Agent) LogFile(namespace, pod, container string, previous bool) (string, error) {
	c, err := a.container(namespace, pod, container)
	if err != nil {
		return "", err
	}
	c.pod.mu.Lock()
	run, started := c.restarts, c.started
	c.pod.mu.Unlock()
	if previous {
		if run == 0 {
			return "", fmt.Errorf("%w: container %q in pod %s/%s has no previous run", kubeletserver.ErrNotFound, container, namespace, pod)
		}
		run--
	} else if !started {
		return "", fmt.Errorf("%w: container %q in pod %s/%s has not started", kubeletserver.ErrNotFound, container, namespace, pod)
	}
	return c.logPath(run), nil
}

// openLog opens a container run's log file; closing the returned Closer marks the file finished.
func openLog(path string) (stdout, stderr io.Writer, closer io.Closer, err error) {
	o, e, err := kubeletserver.NewLogWriter(path)
	if err != nil {
		return nil, nil, nil, err
	}
	return o, e, closeBoth{o, e}, nil
}

type closeBoth [2]io.Closer

func (c closeBoth) Close() error { return errors.Join(c[0].Close(), c[1].Close()) }
