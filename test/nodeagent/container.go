package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Restart back-off: the kubelet's curve (10 s doubling to 5 min) scaled down, since tests wait on it.
const (
	backoffFirst = time.Second
	backoffMax   = 10 * time.Second
	backoffReset = 10 * time.Second
)

// containerRun is one container of a pod, across its restarts. Its fields are guarded by the pod's mutex.
type containerRun struct {
	pod    *podRun
	spec   *corev1.Container
	policy corev1.RestartPolicy
	env    []string
	envErr error

	state     corev1.ContainerState
	lastState corev1.ContainerState
	restarts  int32
	ready     bool
	started   bool
	final     bool // terminated and never to restart
	proc      *os.Process
	exited    chan struct{}
}

// supervise runs the container until the pod stops, restarting it as the restart policy says.
func (c *containerRun) supervise() {
	backoff := backoffFirst
	for {
		began := time.Now()
		code := c.runOnce()
		if c.stopping() {
			return
		}
		restart := c.policy == corev1.RestartPolicyAlways || c.policy == "" ||
			(c.policy == corev1.RestartPolicyOnFailure && code != 0)
		if !restart {
			c.pod.mu.Lock()
			c.final = true
			c.pod.mu.Unlock()
			c.pod.agent.enqueue(c.pod.key)
			return
		}
		if time.Since(began) > backoffReset {
			backoff = backoffFirst
		}
		c.pod.mu.Lock()
		c.lastState, c.restarts = c.state, c.restarts+1
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason:  "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", backoff, c.spec.Name, c.pod.key),
		}}
		c.pod.mu.Unlock()
		c.pod.agent.enqueue(c.pod.key)
		select {
		case <-time.After(backoff):
		case <-c.pod.stopCh:
			return
		}
		backoff = min(2*backoff, backoffMax)
	}
}

func (c *containerRun) stopping() bool {
	select {
	case <-c.pod.stopCh:
		return true
	default:
		return false
	}
}

// runOnce starts the container, runs its probes while it runs, and returns its exit code once it exits; a
// container that cannot start gets a Terminated state with reason StartError and exit code 128, like containerd's.
func (c *containerRun) runOnce() int {
	cmd, logs, err := c.command()
	if err == nil {
		err = cmd.Start()
	}
	now := metav1.Now()
	if err != nil {
		if logs != nil {
			_ = logs.Close()
		}
		c.setTerminated(&corev1.ContainerStateTerminated{
			ExitCode: 128, Reason: "StartError", Message: err.Error(), StartedAt: now, FinishedAt: now,
		})
		return 128
	}
	exited := make(chan struct{})
	c.pod.mu.Lock()
	c.proc, c.exited, c.started, c.ready = cmd.Process, exited, true, c.spec.ReadinessProbe == nil
	c.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
	c.pod.mu.Unlock()
	c.pod.agent.enqueue(c.pod.key)

	ctx, cancel := context.WithCancel(context.Background())
	go c.probe(ctx, c.spec.ReadinessProbe, func(ok bool) { c.setReady(ok) })
	go c.probe(ctx, c.spec.LivenessProbe, func(ok bool) {
		if !ok {
			c.pod.agent.cfg.Log.Printf("pod %s container %s: liveness probe failed, restarting", c.pod.key, c.spec.Name)
			c.kill(c.pod.grace)
		}
	})
	werr := cmd.Wait()
	cancel()
	_ = logs.Close()
	close(exited)
	code, reason := 0, "Completed"
	var ee *exec.ExitError
	switch {
	case errors.As(werr, &ee):
		code, reason = ee.ExitCode(), "Error"
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	case werr != nil:
		code, reason = 128, "Error"
	}
	c.setTerminated(&corev1.ContainerStateTerminated{
		ExitCode: int32(code), Reason: reason, StartedAt: now, FinishedAt: metav1.Now(),
		ContainerID: c.containerID(c.restartCount()),
	})
	return code
}

func (c *containerRun) setTerminated(t *corev1.ContainerStateTerminated) {
	c.pod.mu.Lock()
	c.state, c.ready, c.proc = corev1.ContainerState{Terminated: t}, false, nil
	c.pod.mu.Unlock()
	c.pod.agent.enqueue(c.pod.key)
}

func (c *containerRun) setReady(ok bool) {
	c.pod.mu.Lock()
	changed := c.ready != ok && c.state.Running != nil
	if changed {
		c.ready = ok
	}
	c.pod.mu.Unlock()
	if changed {
		c.pod.agent.enqueue(c.pod.key)
	}
}

// command prepares the container's process: the command resolved on the agent's PATH, run with nsenter in the
// pod's namespaces, its output going to the container's log file.
func (c *containerRun) command() (*exec.Cmd, io.Closer, error) {
	if c.envErr != nil {
		return nil, nil, c.envErr
	}
	argv := append(append([]string(nil), c.spec.Command...), c.spec.Args...)
	if len(c.spec.Command) == 0 {
		return nil, nil, fmt.Errorf("container %q has no command: the local clusterset runs this machine's binaries and never pulls image %q, so give the container a command", c.spec.Name, c.spec.Image)
	}
	vars := envMap(c.env)
	for i := range argv {
		argv[i] = expand(argv[i], vars)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, nil, fmt.Errorf("%v (the local clusterset runs this machine's binaries; image %q is not pulled)", err, c.spec.Image)
	}
	logPath := c.logPath(c.restartCount())
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, nil, err
	}
	stdout, stderr, logs, err := openLog(logPath)
	if err != nil {
		return nil, nil, err
	}
	cmd := c.pod.nsenter(c.spec.WorkingDir, append([]string{path}, argv[1:]...))
	cmd.Env, cmd.Stdout, cmd.Stderr = c.env, stdout, stderr
	return cmd, logs, nil
}

// nsenter returns a command that runs argv inside the pod's network, UTS and mount namespaces, in its own
// process group so that a stop reaches the processes it forks.
func (r *podRun) nsenter(dir string, argv []string) *exec.Cmd {
	if dir == "" {
		dir = "/"
	}
	args := append([]string{"--target", strconv.Itoa(r.pause.Process.Pid), "--net", "--uts", "--mount", "--wd=" + dir, "--"}, argv...)
	cmd := exec.Command("nsenter", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

func (c *containerRun) restartCount() int32 {
	c.pod.mu.Lock()
	defer c.pod.mu.Unlock()
	return c.restarts
}

// logPath is the log file of one run of the container.
func (c *containerRun) logPath(run int32) string {
	return filepath.Join(c.pod.dir, c.spec.Name, strconv.Itoa(int(run))+".log")
}

func (c *containerRun) containerID(run int32) string {
	return fmt.Sprintf("vksfleet://%s/%s/%d", c.pod.uid, c.spec.Name, run)
}

// kill sends SIGTERM to the container's process group, then SIGKILL if it still runs after grace.
func (c *containerRun) kill(grace time.Duration) {
	c.pod.mu.Lock()
	proc, exited := c.proc, c.exited
	c.pod.mu.Unlock()
	if proc == nil {
		return
	}
	_ = syscall.Kill(-proc.Pid, syscall.SIGTERM)
	select {
	case <-exited:
		return
	case <-time.After(grace):
	}
	_ = syscall.Kill(-proc.Pid, syscall.SIGKILL)
	<-exited
}

// statusLocked reports the container; the pod's mutex is held.
func (c *containerRun) statusLocked() corev1.ContainerStatus {
	cs := corev1.ContainerStatus{
		Name: c.spec.Name, Image: c.spec.Image, ImageID: "vksfleet://" + c.spec.Image,
		State: c.state, LastTerminationState: c.lastState, RestartCount: c.restarts,
		Ready: c.ready && c.state.Running != nil, Started: ptr.To(c.state.Running != nil),
	}
	if c.started {
		cs.ContainerID = c.containerID(c.restarts)
	}
	return cs
}
