package main

import (
	"context"
	"fmt"
	"log"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/test/framework/ctrlharness"
)

// exports loads the selector-less Services, then writes each one's EndpointSlice and creates its ServiceExport at
// the configured rate, and waits until every other member has seen every import complete.
func (bn *bench) exports(ctx context.Context, res *results) error {
	n := bn.cfg.services
	log.Printf("loading %d Services into cluster-a", n)
	start := time.Now()
	err := paced(ctx, n, 0, 8, func(i int) error { return bn.a.Client.Create(ctx, bn.sourceService(i)) })
	if err != nil {
		return err
	}
	log.Printf("loaded in %s; waiting for the controllers to be idle", time.Since(start).Round(time.Millisecond))
	if err := bn.waitIdle(ctx, 10*time.Minute); err != nil {
		return err
	}

	// A baseline for the Create calls below: the same call on an otherwise idle clusterset, with an object no
	// controller watches.
	for i := range 20 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("baseline-%d", i)}}
		start := time.Now()
		if err := bn.a.Client.Create(ctx, cm); err != nil {
			return err
		}
		res.idleCreate = append(res.idleCreate, time.Since(start))
	}

	created := make([]time.Time, n)
	res.exportCreate = make([]time.Duration, n)
	writesBefore, err := bn.writes()
	if err != nil {
		return err
	}
	timingsBefore, err := bn.timings()
	if err != nil {
		return err
	}
	seenBefore, err := bn.probes.settle(ctx)
	if err != nil {
		return err
	}
	cpu := startCPU(bn.ctrls)
	log.Printf("creating %d EndpointSlices (%d endpoints each) and ServiceExports at %g/s", n, bn.cfg.endpoints, bn.cfg.rate)
	// Enough concurrent creators that a slow Create never holds back the schedule.
	err = paced(ctx, n, bn.cfg.rate, 64, func(i int) error {
		// The slice is written just before the export, so that its trigger time, which kube-proxy and CoreDNS in
		// cluster-b measure from, is the export's moment: written at load time, it would count the wait for the
		// export too.
		if err := bn.a.Client.Create(ctx, bn.sourceSlice(i)); err != nil {
			return err
		}
		se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: serviceName(i)}}
		for _, w := range bn.seen {
			w.expect(serviceName(i))
		}
		created[i] = time.Now()
		err := bn.a.Client.Create(ctx, se)
		res.exportCreate[i] = time.Since(created[i])
		return err
	})
	if err != nil {
		return err
	}
	first, last := slices.MinFunc(created, time.Time.Compare), slices.MaxFunc(created, time.Time.Compare)
	if n > 1 {
		res.exportRate = float64(n-1) / last.Sub(first).Seconds()
	}
	log.Printf("created in %s; waiting for every other member to see every import", last.Sub(first).Round(time.Millisecond))
	res.exportLatency = map[string][]time.Duration{}
	res.exportLast = make([]time.Duration, n)
	var lastSeen time.Time
	// A backlog drains at what the API servers absorb, a few services per second with many members on 2 cores.
	timeout := max(10*time.Minute, time.Duration(n*bn.cfg.members)*50*time.Millisecond)
	for k, w := range bn.seen {
		member := bn.others[k].Name
		err = w.waitFor(ctx, timeout, func() error {
			if done := len(w.complete); done < n {
				return fmt.Errorf("%d of %d services complete in %s", done, n, member)
			}
			return nil
		})
		if err != nil {
			return err
		}
		w.mu.Lock()
		for i := range n {
			at := w.complete[serviceName(i)]
			d := at.Sub(created[i])
			res.exportLatency[member] = append(res.exportLatency[member], d)
			res.exportLast[i] = max(res.exportLast[i], d)
			if at.After(lastSeen) {
				lastSeen = at
			}
		}
		w.mu.Unlock()
	}
	res.exportCPU = cpu.stop()
	res.exportSpan = lastSeen.Sub(first)
	seenAfter, err := bn.probes.settle(ctx)
	if err != nil {
		return err
	}
	if res.exportSeen, err = seenAfter.sub(seenBefore); err != nil {
		return err
	}
	writesAfter, err := bn.writes()
	if err != nil {
		return err
	}
	res.exportWrites = diff(writesAfter, writesBefore)
	timingsAfter, err := bn.timings()
	if err != nil {
		return err
	}
	res.exportTimings = map[string]ctrlharness.Timings{}
	for name, after := range timingsAfter {
		before := timingsBefore[name]
		res.exportTimings[name] = ctrlharness.Timings{
			Reconciles:       after.Reconciles - before.Reconciles,
			ReconcileSeconds: after.ReconcileSeconds - before.ReconcileSeconds,
			Dequeued:         after.Dequeued - before.Dequeued,
			QueueSeconds:     after.QueueSeconds - before.QueueSeconds,
			Workers:          after.Workers,
		}
	}
	log.Printf("export, in the last member: p50 %s p99 %s, all in %s", percentile(res.exportLast, 50), percentile(res.exportLast, 99), res.exportSpan)
	return nil
}

func serviceName(i int) string { return fmt.Sprintf("svc-%04d", i) }

// sourceService is a selector-less Service: its endpoints are the benchmark's own slice, so that thousands of
// services cost no pods and no endpointslice controller work.
func (bn *bench) sourceService(i int) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: serviceName(i)},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)},
		}},
	}
}

// sourceSlice is service i's EndpointSlice, its last-change-trigger-time now, in the format the EndpointSlice
// controller writes it.
func (bn *bench) sourceSlice(i int) *discoveryv1.EndpointSlice {
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: serviceName(i) + "-src",
			Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().Format(time.RFC3339Nano)},
			Labels: map[string]string{
				discoveryv1.LabelServiceName: serviceName(i),
				discoveryv1.LabelManagedBy:   sourceManagedBy,
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	for e := range bn.cfg.endpoints {
		k := i*bn.cfg.endpoints + e // a distinct address per endpoint, outside every member's pod range
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 200+k/62500, k/250%250, k%250+1)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		})
	}
	return slice
}
