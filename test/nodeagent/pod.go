package nodeagent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"vksfleet.dev/fleet/test/dataplane"
)

// podRun is a pod this agent runs: its sandbox (network namespace, addresses, a pause process holding the pod's
// hostname and /etc files) and its containers.
type podRun struct {
	agent    *Agent
	key      types.NamespacedName
	uid      types.UID
	ns       string
	hostname string
	ipOff    int
	ips      []netip.Addr
	started  metav1.Time
	pause    *exec.Cmd
	dir      string
	grace    time.Duration // terminationGracePeriodSeconds

	mu          sync.Mutex
	containers  []*containerRun
	conds       map[corev1.PodConditionType]corev1.PodCondition
	stopping    bool
	releaseOnce sync.Once
	stopCh      chan struct{} // closed when the pod starts stopping
	stopped     chan struct{} // closed when everything is gone
}

// startPod builds the sandbox and starts every container.
func (a *Agent) startPod(ctx context.Context, pod *corev1.Pod) (r *podRun, err error) {
	off, ips, err := a.ipam.allocate()
	if err != nil {
		return nil, err
	}
	r = &podRun{
		agent: a, key: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, uid: pod.UID,
		hostname: podHostname(pod), ipOff: off, ips: ips, started: metav1.Now(),
		dir:    filepath.Join(a.cfg.StateDir, string(pod.UID)),
		grace:  30 * time.Second,
		conds:  map[corev1.PodConditionType]corev1.PodCondition{},
		stopCh: make(chan struct{}), stopped: make(chan struct{}),
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		r.grace = time.Duration(*g) * time.Second
	}
	defer func() {
		if err != nil {
			r.teardown()
			err = fmt.Errorf("starting pod: %w", err)
		}
	}()
	// A namespace of the same pod left by an earlier agent run would make the new one fail.
	if err := dataplane.DelPod(string(pod.UID)); err != nil {
		return r, err
	}
	if r.ns, err = dataplane.AddPod(string(pod.UID), ips, a.cfg.Addrs[0]); err != nil {
		return r, err
	}
	if err := r.writeEtc(pod); err != nil {
		return r, err
	}
	// The pause process owns the pod's UTS namespace (its hostname) and, through `ip netns exec`, a mount
	// namespace with the pod's resolv.conf and hosts; containers and exec join it with nsenter.
	r.pause = exec.Command("ip", "netns", "exec", r.ns, a.self, "pause", r.hostname)
	r.pause.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUTS, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	r.pause.Stderr = os.Stderr
	ready, err := r.pause.StdoutPipe()
	if err != nil {
		return r, err
	}
	if err := r.pause.Start(); err != nil {
		return r, err
	}
	// pause prints one line once the hostname is set, so that no container starts with the node's.
	if err := readLine(ready, 10*time.Second); err != nil {
		return r, fmt.Errorf("pause process: %w", err)
	}
	// The environment sees the pod as it will be reported: with its addresses.
	view := pod.DeepCopy()
	r.fillAddresses(&view.Status)
	for i := range pod.Spec.Containers {
		c := &containerRun{pod: r, spec: &pod.Spec.Containers[i], policy: pod.Spec.RestartPolicy}
		c.env, c.envErr = containerEnv(ctx, a.cfg.Kube, view, c.spec, r.hostname)
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
		r.containers = append(r.containers, c)
	}
	a.mu.Lock()
	a.pods[r.key] = r
	a.mu.Unlock()
	for _, c := range r.containers {
		go c.supervise()
	}
	return r, nil
}

// podHostname is the pod's hostname: spec.hostname, else its name, cut to a DNS label.
func podHostname(pod *corev1.Pod) string {
	h := pod.Spec.Hostname
	if h == "" {
		h = pod.Name
	}
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-.")
	}
	return h
}

// writeEtc writes the files `ip netns exec` binds over /etc for the pod's processes.
func (r *podRun) writeEtc(pod *corev1.Pod) error {
	dir := filepath.Join(dataplane.EtcNetns, r.ns)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	domain := r.agent.cfg.ClusterDomain
	search := []string{pod.Namespace + ".svc." + domain, "svc." + domain, domain}
	servers := []string{r.agent.cfg.ClusterDNS}
	options := []string{"ndots:5"}
	if c := pod.Spec.DNSConfig; c != nil {
		servers = append(servers, c.Nameservers...)
		search = append(search, c.Searches...)
		for _, o := range c.Options {
			if o.Value != nil {
				options = append(options, o.Name+":"+*o.Value)
			} else {
				options = append(options, o.Name)
			}
		}
	}
	if pod.Spec.DNSPolicy == corev1.DNSNone {
		servers, search, options = servers[1:], search[3:], options[1:]
	}
	var resolv strings.Builder
	fmt.Fprintf(&resolv, "search %s\n", strings.Join(search, " "))
	for _, s := range servers {
		fmt.Fprintf(&resolv, "nameserver %s\n", s)
	}
	fmt.Fprintf(&resolv, "options %s\n", strings.Join(options, " "))
	names := r.hostname
	if pod.Spec.Subdomain != "" {
		names = fmt.Sprintf("%s.%s.%s.svc.%s %s", r.hostname, pod.Spec.Subdomain, pod.Namespace, domain, r.hostname)
	}
	hosts := "# Kubernetes-managed hosts file (local clusterset node agent).\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	for _, ip := range r.ips {
		hosts += ip.String() + "\t" + names + "\n"
	}
	for name, body := range map[string]string{"resolv.conf": resolv.String(), "hosts": hosts, "hostname": r.hostname + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// readLine waits up to timeout for one line on r.
func readLine(r io.Reader, timeout time.Duration) error {
	done := make(chan error, 1)
	go func() {
		_, err := bufio.NewReader(r).ReadString('\n')
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("no answer within %s", timeout)
	}
}

func (r *podRun) fillAddresses(st *corev1.PodStatus) {
	st.HostIP = r.agent.cfg.Addrs[0].String()
	st.HostIPs = nil
	for _, a := range r.agent.cfg.Addrs {
		st.HostIPs = append(st.HostIPs, corev1.HostIP{IP: a.String()})
	}
	st.PodIP = r.ips[0].String()
	st.PodIPs = nil
	for _, ip := range r.ips {
		st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: ip.String()})
	}
}

// status reports the pod as the kubelet would: phase from the containers, Ready from their readiness.
func (r *podRun) status(pod *corev1.Pod) corev1.PodStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := corev1.PodStatus{QOSClass: pod.Status.QOSClass, StartTime: &r.started}
	r.fillAddresses(&st)
	running, waitingFirst, done, failed, ready := 0, 0, 0, 0, 0
	for _, c := range r.containers {
		cs := c.statusLocked()
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
		switch {
		case cs.State.Running != nil:
			running++
		case cs.State.Terminated != nil && c.final:
			done++
			if cs.State.Terminated.ExitCode != 0 {
				failed++
			}
		case cs.State.Waiting != nil && cs.RestartCount == 0 && cs.LastTerminationState.Terminated == nil:
			waitingFirst++
		}
		if cs.Ready {
			ready++
		}
	}
	n := len(r.containers)
	switch {
	case done == n && failed == 0:
		st.Phase = corev1.PodSucceeded
	case done == n:
		st.Phase = corev1.PodFailed
	case waitingFirst == n:
		st.Phase = corev1.PodPending
	default:
		st.Phase = corev1.PodRunning
	}
	allReady := ready == n && st.Phase == corev1.PodRunning
	r.setCond(corev1.PodReadyToStartContainers, true)
	r.setCond(corev1.PodInitialized, true)
	r.setCond(corev1.ContainersReady, allReady)
	r.setCond(corev1.PodReady, allReady)
	r.setCond(corev1.PodScheduled, true)
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady, corev1.PodScheduled} {
		st.Conditions = append(st.Conditions, r.conds[t])
	}
	return st
}

// setCond records a condition, keeping its transition time while its status stays.
func (r *podRun) setCond(t corev1.PodConditionType, ok bool) {
	s := corev1.ConditionFalse
	if ok {
		s = corev1.ConditionTrue
	}
	if c, have := r.conds[t]; have && c.Status == s {
		return
	}
	r.conds[t] = corev1.PodCondition{Type: t, Status: s, LastTransitionTime: metav1.Now()}
}

// stopAsync starts stopping the pod with the given grace period and reports whether it has stopped.
func (r *podRun) stopAsync(grace time.Duration) bool {
	r.mu.Lock()
	first := !r.stopping
	r.stopping = true
	r.mu.Unlock()
	if first {
		close(r.stopCh)
		go func() {
			r.stopContainers(grace)
			r.teardown()
			close(r.stopped)
			r.agent.enqueue(r.key)
		}()
	}
	select {
	case <-r.stopped:
		return true
	default:
		return false
	}
}

// stop stops the pod and waits until it is gone.
func (r *podRun) stop(grace time.Duration) {
	r.stopAsync(grace)
	<-r.stopped
}

// stopContainers sends SIGTERM to every container, and SIGKILL to those still running after the grace period.
func (r *podRun) stopContainers(grace time.Duration) {
	var wg sync.WaitGroup
	for _, c := range r.containers {
		wg.Go(func() { c.kill(grace) })
	}
	wg.Wait()
}

// teardown removes the sandbox and the logs.
func (r *podRun) teardown() {
	r.releaseSandbox()
	if err := os.RemoveAll(r.dir); err != nil {
		r.agent.cfg.Log.Printf("pod %s: removing logs: %v", r.key, err)
	}
}

// releaseSandbox removes the pause process, the network namespace and its /etc files, and frees the addresses:
// once for a pod, when it has finished or stops. Its logs stay until the pod is deleted.
func (r *podRun) releaseSandbox() {
	r.releaseOnce.Do(func() {
		var errs []error
		if r.pause != nil && r.pause.Process != nil {
			_ = syscall.Kill(-r.pause.Process.Pid, syscall.SIGKILL)
			_ = r.pause.Wait()
		}
		errs = append(errs, dataplane.DelPod(string(r.uid)))
		if r.ns != "" {
			errs = append(errs, os.RemoveAll(filepath.Join(dataplane.EtcNetns, r.ns)))
		}
		r.agent.ipam.release(r.ipOff)
		if err := errors.Join(errs...); err != nil {
			r.agent.cfg.Log.Printf("pod %s: removing the sandbox: %v", r.key, err)
		}
	})
}
