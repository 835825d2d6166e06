package main

import (
	"context"
	"fmt"
	"log"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/poll"
)

// readiness exports a Deployment whose pods start not ready, waits until every other member imports all of them,
// then makes them ready one at a time, each time waiting until every other member's imported slices show that
// pod's address ready. Each pod is made ready just after a whole second: kube-controller-manager's endpointslice
// controller takes the slice's last-change-trigger-time from the pod's Ready condition, whose lastTransitionTime
// the API keeps to the second, so the probes in cluster-b measure from that second, and a change made late in it
// would count up to a second that never passed. That second is more than kube-proxy's minimum sync period after the
// previous pod's: each change reaches kube-proxy alone, so these rows measure one change's way, where the export
// phase measures a stream of them; changes a period apart would all wait the same part of it for their sync, set
// by where the first fell.
func (bn *bench) readiness(ctx context.Context, res *results) error {
	r := bn.cfg.replicas
	log.Printf("readiness: a Deployment of %d pods that start not ready", r)
	sel := map[string]string{"app": readyService}
	objs := []client.Object{
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: readyService},
			Spec: corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)},
			}},
		},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: readyService},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(int32(r)),
				Selector: &metav1.LabelSelector{MatchLabels: sel},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: sel, Annotations: map[string]string{clusterset.NotReadyAnnotation: "true"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{
						Name: "app", Image: "registry.k8s.io/pause:3.10",
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					}}},
				},
			},
		},
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: readyService}},
	}
	for _, o := range objs {
		if err := bn.a.Client.Create(ctx, o); err != nil {
			return err
		}
	}
	var pods []corev1.Pod
	err := poll.Until(ctx, 100*time.Millisecond, 5*time.Minute, func() error {
		list := &corev1.PodList{}
		if err := bn.a.Client.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels(sel)); err != nil {
			return err
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
				pods = append(pods, p)
			}
		}
		if len(pods) != r {
			return fmt.Errorf("%d of %d pods running in cluster-a", len(pods), r)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for k, w := range bn.seen {
		err = w.waitFor(ctx, 5*time.Minute, func() error {
			if got := w.addresses(readyService); got != r || !w.imports[readyService] {
				return fmt.Errorf("%s imports %d of %d endpoints", bn.others[k].Name, got, r)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	seenBefore, err := bn.probes.settle(ctx)
	if err != nil {
		return err
	}
	cpu := startCPU(bn.ctrls)
	res.readyLatency = map[string][]time.Duration{}
	var lastReady time.Time
	for _, p := range pods {
		ip := p.Status.PodIP
		at := time.Now().Truncate(time.Second).Add(time.Second)
		for at.Sub(lastReady) <= res.minSync {
			at = at.Add(time.Second)
		}
		select {
		case <-time.After(time.Until(at)):
		case <-ctx.Done():
			return ctx.Err()
		}
		lastReady = at
		// The clock starts before SetPodReady's Get and status update, which stand in for the kubelet's.
		start := time.Now()
		if err := bn.a.SetPodReady(ctx, namespace, p.Name, true); err != nil {
			return err
		}
		var last time.Duration
		for k, w := range bn.seen {
			member := bn.others[k].Name
			var at time.Time
			err := w.waitFor(ctx, time.Minute, func() error {
				var ok bool
				if at, ok = w.readyAt[readyService][ip]; !ok {
					return fmt.Errorf("pod %s (%s) is not ready in %s", p.Name, ip, member)
				}
				return nil
			})
			if err != nil {
				return err
			}
			res.readyLatency[member] = append(res.readyLatency[member], at.Sub(start))
			last = max(last, at.Sub(start))
		}
		res.readyLast = append(res.readyLast, last)
	}
	res.readyCPU = cpu.stop()
	seenAfter, err := bn.probes.settle(ctx)
	if err != nil {
		return err
	}
	if res.readySeen, err = seenAfter.sub(seenBefore); err != nil {
		return err
	}
	log.Printf("readiness, in the last member: p50 %s p99 %s", percentile(res.readyLast, 50), percentile(res.readyLast, 99))
	return nil
}
