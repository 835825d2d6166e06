// Package nodeagent is the kubelet of the local clusterset's nodes, as far as tests and demos need one: it
// registers its Node, runs the pods bound to it as processes of this machine's own binaries, each pod in a network
// namespace of its own with an address from the node's pod CIDRs, reports their status (phase, addresses,
// container states and restarts, readiness from probes), stops them gracefully on deletion, and serves exec and
// logs to its API server through Kubernetes' own streaming server.
//
// Images are never pulled: a container's command runs as a process, looked up on the agent's PATH, inside the
// pod's network, UTS (hostname) and mount namespaces; the pod's /etc/resolv.conf and /etc/hosts are bound over
// the machine's for its processes only.
package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Config describes the node an agent runs.
type Config struct {
	// NodeName is the Node's name, also kube-proxy's --hostname-override.
	NodeName string
	// Kube reaches the member's API server.
	Kube kubernetes.Interface
	// Addrs are the node's addresses, IPv4 first; the first is where the API server reaches the agent.
	Addrs []netip.Addr
	// PodCIDRs are the node's pod ranges, one per family.
	PodCIDRs []netip.Prefix
	// Labels are added to the Node's labels (zone and region).
	Labels map[string]string
	// ClusterDNS is the cluster DNS Service's address, the pods' nameserver.
	ClusterDNS string
	// ClusterDomain is the cluster's DNS domain, default cluster.local.
	ClusterDomain string
	// Port is where the agent serves exec and logs (the Node's kubelet endpoint).
	Port int
	// StateDir holds container logs.
	StateDir string
	// Log receives the agent's own messages.
	Log *log.Logger
	// Server serves exec and logs for the runtime; it is started by Run. Nil serves nothing (unit tests).
	Server func(ctx context.Context, rt *Agent, addr string) error
}

// Agent runs one node's pods.
type Agent struct {
	cfg    Config
	self   string
	ipam   *ipam
	lister listersv1.PodLister
	queue  workqueue.TypedRateLimitingInterface[types.NamespacedName]

	mu   sync.Mutex
	pods map[types.NamespacedName]*podRun
}

const workers = 4

// Run registers the node, then runs its pods until ctx ends, when it stops every pod at once and removes their
// namespaces.
func Run(ctx context.Context, cfg Config) error {
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = "cluster.local"
	}
	if cfg.Log == nil {
		cfg.Log = log.New(os.Stderr, "", log.LstdFlags)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	a := &Agent{
		cfg: cfg, self: self, ipam: newIPAM(cfg.PodCIDRs), pods: map[types.NamespacedName]*podRun{},
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](100*time.Millisecond, 5*time.Second)),
	}
	if err := a.register(ctx); err != nil {
		return err
	}
	errc := make(chan error, 1)
	if cfg.Server != nil {
		go func() { errc <- cfg.Server(ctx, a, netip.AddrPortFrom(cfg.Addrs[0], uint16(cfg.Port)).String()) }()
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cfg.Kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
	}))
	inf := factory.Core().V1().Pods()
	a.lister = inf.Lister()
	enqueue := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if p, ok := obj.(*corev1.Pod); ok {
			a.queue.Add(types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
		}
	}
	_, _ = inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue,
	})
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return ctx.Err()
	}
	cfg.Log.Printf("node %s ready: pods from %v, exec and logs on port %d", cfg.NodeName, cfg.PodCIDRs, cfg.Port)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for a.processNext(ctx) {
			}
		})
	}
	select {
	case <-ctx.Done():
		err = nil
	case err = <-errc:
	}
	a.queue.ShutDown()
	wg.Wait()
	factory.Shutdown()
	a.stopAll()
	return err
}

// register creates or updates the Node, Ready, with its addresses, pod CIDRs, labels and kubelet endpoint.
func (a *Agent) register(ctx context.Context) error {
	nodes := a.cfg.Kube.CoreV1().Nodes()
	labels := map[string]string{
		corev1.LabelHostname: a.cfg.NodeName, corev1.LabelOSStable: "linux", corev1.LabelArchStable: runtime.GOARCH,
	}
	for k, v := range a.cfg.Labels {
		labels[k] = v
	}
	cidrs := make([]string, len(a.cfg.PodCIDRs))
	for i, c := range a.cfg.PodCIDRs {
		cidrs[i] = c.String()
	}
	node, err := nodes.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		node, err = nodes.Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName, Labels: labels},
			Spec:       corev1.NodeSpec{PodCIDR: cidrs[0], PodCIDRs: cidrs},
		}, metav1.CreateOptions{})
	case err == nil:
		for k, v := range labels {
			if node.Labels == nil {
				node.Labels = map[string]string{}
			}
			node.Labels[k] = v
		}
		node, err = nodes.Update(ctx, node, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("nodeagent: registering node %s: %w", a.cfg.NodeName, err)
	}
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("250"),
	}
	node.Status = corev1.NodeStatus{
		Capacity: capacity, Allocatable: capacity, Phase: corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "node agent of the local clusterset is ready", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(a.cfg.Port)}},
		NodeInfo: corev1.NodeSystemInfo{
			OperatingSystem: "linux", Architecture: runtime.GOARCH, KubeletVersion: "v1.36.3",
			ContainerRuntimeVersion: "vksfleet-nodeagent://1",
		},
	}
	// Only InternalIPs: the API server tries a Node's addresses in its preferred order, Hostname first by default.
	for _, addr := range a.cfg.Addrs {
		node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: addr.String()})
	}
	if node, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("nodeagent: node %s status: %w", a.cfg.NodeName, err)
	}
	// The API server taints a new Node not-ready; the node lifecycle controller, which the local clusterset does
	// not run, would lift the taint once the node reports Ready.
	kept := node.Spec.Taints[:0]
	for _, t := range node.Spec.Taints {
		if t.Key != corev1.TaintNodeNotReady {
			kept = append(kept, t)
		}
	}
	if len(kept) != len(node.Spec.Taints) {
		node.Spec.Taints = kept
		if _, err := nodes.Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("nodeagent: lifting the not-ready taint of %s: %w", a.cfg.NodeName, err)
		}
	}
	return nil
}

func (a *Agent) processNext(ctx context.Context) bool {
	key, quit := a.queue.Get()
	if quit {
		return false
	}
	defer a.queue.Done(key)
	if err := a.sync(ctx, key); err != nil {
		if ctx.Err() == nil {
			a.cfg.Log.Printf("pod %s: %v", key, err)
			a.queue.AddRateLimited(key)
		}
		return true
	}
	a.queue.Forget(key)
	return true
}

func (a *Agent) enqueue(key types.NamespacedName) { a.queue.Add(key) }

func (a *Agent) sync(ctx context.Context, key types.NamespacedName) error {
	pod, err := a.lister.Pods(key.Namespace).Get(key.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	a.mu.Lock()
	run := a.pods[key]
	a.mu.Unlock()
	if run != nil && (pod == nil || pod.UID != run.uid) {
		// Deleted without a grace period, or replaced by a pod of the same name: nothing waits any more.
		run.stop(0)
		a.forget(key, run)
		run = nil
	}
	if pod == nil {
		return nil
	}
	if pod.DeletionTimestamp != nil {
		return a.finishDeletion(ctx, pod, run)
	}
	if run == nil {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			return nil
		}
		if why := unsupported(pod); why != "" {
			return a.fail(ctx, pod, "Unsupported", why)
		}
		if run, err = a.startPod(ctx, pod); err != nil {
			return err
		}
	}
	status := run.status(pod)
	if status.Phase == corev1.PodSucceeded || status.Phase == corev1.PodFailed {
		// Nothing runs in a finished pod any more: its address goes back to the node, as with the kubelet.
		run.releaseSandbox()
	}
	if equality.Semantic.DeepEqual(status, pod.Status) {
		return nil
	}
	p := pod.DeepCopy()
	p.Status = status
	_, err = a.cfg.Kube.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // a newer event brings the pod back
	}
	return err
}

// finishDeletion stops a deleted pod's containers within its grace period, then removes the pod from the API
// server, as the kubelet does once its containers are gone.
func (a *Agent) finishDeletion(ctx context.Context, pod *corev1.Pod, run *podRun) error {
	if run != nil {
		grace := 30 * time.Second
		if pod.DeletionGracePeriodSeconds != nil {
			grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
		}
		if !run.stopAsync(grace) {
			return nil // stopping; the end of the stop enqueues the pod again
		}
		a.forget(types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, run)
	}
	zero := int64(0)
	err := a.cfg.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

func (a *Agent) forget(key types.NamespacedName, run *podRun) {
	a.mu.Lock()
	if a.pods[key] == run {
		delete(a.pods, key)
	}
	a.mu.Unlock()
}

// unsupported says why this agent cannot run a pod, or "" when it can.
func unsupported(pod *corev1.Pod) string {
	switch {
	case pod.Spec.HostNetwork:
		return "hostNetwork pods are not supported by the local clusterset's node agent"
	case len(pod.Spec.InitContainers) > 0:
		return "init containers are not supported by the local clusterset's node agent"
	}
	return ""
}

// fail marks a pod that cannot run as Failed, with the reason, as the kubelet does for a pod it rejects.
func (a *Agent) fail(ctx context.Context, pod *corev1.Pod, reason, msg string) error {
	p := pod.DeepCopy()
	p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, reason, msg
	_, err := a.cfg.Kube.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// stopAll kills every pod at once: the node is going away.
func (a *Agent) stopAll() {
	a.mu.Lock()
	runs := make([]*podRun, 0, len(a.pods))
	for _, r := range a.pods {
		runs = append(runs, r)
	}
	a.pods = map[types.NamespacedName]*podRun{}
	a.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Go(func() { r.stop(0) })
	}
	wg.Wait()
}

// lookup returns the running pod with the given name.
func (a *Agent) lookup(namespace, name string) (*podRun, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r := a.pods[types.NamespacedName{Namespace: namespace, Name: name}]; r != nil {
		return r, nil
	}
	return nil, errors.New("pod " + namespace + "/" + name + " does not run on node")
}
