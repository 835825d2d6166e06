package clusterset

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// NotReadyAnnotation, set to "true" on a Pod, makes the pod loop start it Running but not Ready, so that a test
// can make it ready later with SetPodReady.
const NotReadyAnnotation = "fleet.vksfleet.dev/start-not-ready"

// podLoop stands in for the kubelet on the member's one virtual node: it binds every unscheduled Pod to the node,
// starts it (Running and Ready, with one address per family from the pod CIDRs), and finishes graceful deletions.
// Once a pod is Running the loop leaves its status alone, so tests may change readiness themselves.
type podLoop struct {
	kube   kubernetes.Interface
	node   string
	hostIP string
	ips    *ipAllocator
	lister listersv1.PodLister
	queue  workqueue.TypedRateLimitingInterface[types.NamespacedName]
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

const podWorkers = 4

func startPodLoop(kube kubernetes.Interface, node, hostIP string, ips *ipAllocator) *podLoop {
	ctx, cancel := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactory(kube, 0)
	inf := factory.Core().V1().Pods()
	l := &podLoop{
		kube: kube, node: node, hostIP: hostIP, ips: ips, lister: inf.Lister(), cancel: cancel,
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName]()),
	}
	enqueue := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			l.queue.Add(types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
		}
	}
	_, _ = inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	factory.Start(ctx.Done())
	l.wg.Go(func() {
		cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced)
		var workers sync.WaitGroup
		for range podWorkers {
			workers.Go(func() {
				for l.processNext(ctx) {
				}
			})
		}
		<-ctx.Done()
		l.queue.ShutDown()
		workers.Wait()
		factory.Shutdown()
	})
	return l
}

func (l *podLoop) stop() {
	l.cancel()
	l.wg.Wait()
}

func (l *podLoop) processNext(ctx context.Context) bool {
	key, quit := l.queue.Get()
	if quit {
		return false
	}
	defer l.queue.Done(key)
	if err := l.sync(ctx, key); err != nil && ctx.Err() == nil {
		l.queue.AddRateLimited(key)
		return true
	}
	l.queue.Forget(key)
	return true
}

func (l *podLoop) sync(ctx context.Context, key types.NamespacedName) error {
	pod, err := l.lister.Pods(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	switch {
	case pod.DeletionTimestamp != nil:
		// No kubelet will ever confirm the containers stopped: finish the deletion as it would.
		zero := int64(0)
		err := l.kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID},
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	case pod.Spec.NodeName == "":
		err := l.kube.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: l.node},
		}, metav1.CreateOptions{})
		if apierrors.IsConflict(err) {
			return nil // bound meanwhile; the update brings it back
		}
		return err
	case pod.Spec.NodeName != l.node || pod.Status.Phase != corev1.PodPending:
		return nil
	}
	return l.start(ctx, pod)
}

// start marks a bound, pending pod as running, the way the kubelet reports it.
func (l *podLoop) start(ctx context.Context, pod *corev1.Pod) error {
	ips, err := l.ips.allocate()
	if err != nil {
		return err
	}
	ready := corev1.ConditionTrue
	if pod.Annotations[NotReadyAnnotation] == "true" {
		ready = corev1.ConditionFalse
	}
	now := metav1.NewTime(time.Now())
	p := pod.DeepCopy()
	p.Status.Phase = corev1.PodRunning
	p.Status.HostIP = l.hostIP
	p.Status.HostIPs = []corev1.HostIP{{IP: p.Status.HostIP}}
	p.Status.PodIP = ips[0]
	p.Status.PodIPs = nil
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	p.Status.StartTime = &now
	p.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: ready, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: ready, LastTransitionTime: now},
	}
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "fleet://" + c.Image,
			ContainerID: fmt.Sprintf("fleet://%s/%s", p.UID, c.Name),
			Ready:       ready == corev1.ConditionTrue, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	_, err = l.kube.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // deleted or changed meanwhile; a newer event brings it back
	}
	return err
}

// SetPodReady sets a running pod's Ready and ContainersReady conditions, as the kubelet does when its readiness
// probe changes.
func (c *Cluster) SetPodReady(ctx context.Context, namespace, name string, ready bool) error {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pods := c.Kube.CoreV1().Pods(namespace)
	pod, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if pod.Status.Phase != corev1.PodRunning {
		return fmt.Errorf("pod %s/%s is %s, not Running", namespace, name, pod.Status.Phase)
	}
	now := metav1.Now()
	for i, cond := range pod.Status.Conditions {
		if (cond.Type == corev1.PodReady || cond.Type == corev1.ContainersReady) && cond.Status != status {
			pod.Status.Conditions[i].Status = status
			pod.Status.Conditions[i].LastTransitionTime = now
		}
	}
	for i := range pod.Status.ContainerStatuses {
		pod.Status.ContainerStatuses[i].Ready = ready
	}
	_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return err
}
