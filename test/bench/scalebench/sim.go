package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	brokerv1alpha1 "vksfleet.dev/fleet/api/broker/v1alpha1"
	"vksfleet.dev/fleet/cli/install"
	"vksfleet.dev/fleet/controller"
	"vksfleet.dev/fleet/controller/apply"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/merge"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/proc"
)

// A simulated member is what a member's controller is towards the broker, run with the controller's own code and
// the member's own identity as join gives it (install.BrokerIdentity, install.MintCredential): the records cache
// of controller.RecordCacheOptions, cluster-wide, and the cache of its own namespace in the previous layout, which
// the controller keeps for its mirror writes; the member directory read every 5 s; its MemberLease and the
// previous layout's Lease renewed by broker.Renewer every grace/3; its exports published as records and mirrored
// (broker.Record, broker.Slice, apply), and every other member's Leases judged by broker.Liveness, at the
// controller's default lease grace (memberlease.DefaultGrace). What it leaves
// out is the member's own cluster (its API server, the import's writes there, CoreDNS): none of it reaches the
// broker, whose cost per member the simulation measures. Every member runs in this process, on the cores the
// broker uses too, with one replica each where a Deployment runs two: the broker's watch counts are doubled in
// the report for that.
type member struct {
	id      string
	records client.Client // the member's identity, the records' scheme
	legacy  client.Client // the member's identity, the previous layout's scheme
	caches  []cache.Cache // the records cache, then the own-namespace cache of the previous layout
	renewer *broker.Renewer
	mirror  *broker.Renewer
	stop    context.CancelFunc
	renew   chan bool // false stops renewals (a member lost), true resumes them

	mu       sync.Mutex
	seen     map[string]time.Time // records of other members (namespace/name) -> when this member's cache had them
	liveness *broker.Liveness
	renewed  time.Time // its last renewal
}

// sim is one run: the broker and its members.
type sim struct {
	cfg    *rest.Config
	info   install.BrokerInfo
	grace  time.Duration
	pid    int // the broker's kube-apiserver
	legacy *runtime.Scheme

	mu      sync.Mutex
	members []*member
}

// join gives member id its identity as join does, starts its caches, renewals and directory reads, and waits
// for its caches to sync.
func (s *sim) join(ctx context.Context, id string) (*member, error) {
	if err := install.BrokerIdentity(ctx, s.info, id); err != nil {
		return nil, fmt.Errorf("joining %s: %w", id, err)
	}
	kubeconfig, _, err := install.MintCredential(ctx, s.info, id, time.Hour)
	if err != nil {
		return nil, fmt.Errorf("a credential of %s: %w", id, err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	// The controller's defaults (cmd/controller --qps/--burst).
	cfg.QPS, cfg.Burst = 200, 400
	records, err := brokerv1alpha1.NewScheme()
	if err != nil {
		return nil, err
	}
	m := &member{id: id, seen: map[string]time.Time{}, liveness: broker.NewLiveness(id, s.grace), renew: make(chan bool, 1),
		renewer: &broker.Renewer{ClusterID: id, Holder: id + "/sim"}}
	m.mirror = m.renewer.Mirror()
	if m.records, err = client.New(cfg, client.Options{Scheme: records}); err != nil {
		return nil, err
	}
	if m.legacy, err = client.New(cfg, client.Options{Scheme: s.legacy}); err != nil {
		return nil, err
	}
	own := controller.RecordCacheOptions()
	own.DefaultNamespaces = map[string]cache.Config{names.BrokerNamespace(id): {}}
	for _, c := range []struct {
		scheme *runtime.Scheme
		opts   cache.Options
	}{{records, controller.RecordCacheOptions()}, {s.legacy, own}} {
		c.opts.Scheme = c.scheme
		ch, err := cache.New(cfg, c.opts)
		if err != nil {
			return nil, err
		}
		m.caches = append(m.caches, ch)
	}
	ctx, m.stop = context.WithCancel(ctx)
	for i, ch := range m.caches {
		for _, obj := range []client.Object{&mcsv1beta1.ServiceImport{}, &discoveryv1.EndpointSlice{}, &coordinationv1.Lease{}} {
			inf, err := ch.GetInformer(ctx, obj)
			if err != nil {
				m.stop()
				return nil, err
			}
			if _, isRecord := obj.(*mcsv1beta1.ServiceImport); i == 0 && isRecord {
				if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: m.saw}); err != nil {
					m.stop()
					return nil, err
				}
			}
		}
		go func() { _ = ch.Start(ctx) }()
		if !ch.WaitForCacheSync(ctx) {
			m.stop()
			return nil, fmt.Errorf("%s's caches did not sync", id)
		}
	}
	if err := m.renewOnce(ctx, s.grace); err != nil {
		m.stop()
		return nil, err
	}
	if _, err := broker.EnsureSentinel(ctx, m.caches[0], m.records, id); err != nil {
		m.stop()
		return nil, err
	}
	go m.run(ctx, s.grace)
	s.mu.Lock()
	s.members = append(s.members, m)
	s.mu.Unlock()
	return m, nil
}

// saw stamps when the member's records cache first had another member's record.
func (m *member) saw(obj any) {
	o, ok := obj.(client.Object)
	if !ok || o.GetNamespace() == names.BrokerNamespace(m.id) {
		return
	}
	key := o.GetNamespace() + "/" + o.GetName()
	m.mu.Lock()
	if _, ok := m.seen[key]; !ok {
		m.seen[key] = time.Now()
	}
	m.mu.Unlock()
}

// seenAt says when the member's cache had the record of member id named name; false if not yet.
func (m *member) seenAt(id, name string) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	at, ok := m.seen[names.BrokerNamespace(id)+"/"+name]
	return at, ok
}

// run renews the member's Leases every grace/3, reads the member directory every 5 s as the controller's scope
// poll does, and judges the other members' Leases as often as the controller's heartbeat (grace/10, within 100 ms
// and 1 s), until ctx ends.
func (m *member) run(ctx context.Context, grace time.Duration) {
	renewals := time.NewTicker(grace / 3)
	directory := time.NewTicker(5 * time.Second)
	judge := time.NewTicker(min(time.Second, max(100*time.Millisecond, grace/10)))
	defer renewals.Stop()
	defer directory.Stop()
	defer judge.Stop()
	renewing := true
	for {
		select {
		case <-ctx.Done():
			return
		case renewing = <-m.renew:
		case <-renewals.C:
			if renewing {
				_ = m.renewOnce(ctx, grace)
			}
		case <-directory.C:
			entries := &corev1.ConfigMapList{}
			if err := m.records.List(ctx, entries, client.InNamespace(broker.DirectoryNamespace),
				client.MatchingLabelsSelector{Selector: broker.DirectorySelector}); err == nil {
				broker.ReadDirectory(entries.Items)
			}
		case <-judge.C:
			leases := &coordinationv1.LeaseList{}
			if err := m.caches[0].List(ctx, leases); err == nil {
				m.mu.Lock()
				m.liveness.Observe(leases.Items, time.Now())
				m.mu.Unlock()
			}
		}
	}
}

// alive says whether the member judges member id alive.
func (m *member) alive(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.liveness.Alive(id)
}

// renewOnce renews the member's Lease in both layouts, as the controller's heartbeat does.
func (m *member) renewOnce(ctx context.Context, grace time.Duration) error {
	now := time.Now()
	if _, _, err := m.renewer.Renew(ctx, m.records, grace, now); err != nil {
		return fmt.Errorf("renewing %s's MemberLease: %w", m.id, err)
	}
	m.mu.Lock()
	m.renewed = now
	m.mu.Unlock()
	if _, _, err := m.mirror.Renew(ctx, m.legacy, grace, now); err != nil {
		return fmt.Errorf("renewing %s's Lease: %w", m.id, err)
	}
	return nil
}

// publish exports service ns/name from the member with one ready endpoint, in both layouts, as publish.go does.
func (m *member) publish(ctx context.Context, ns, name string, addr string) error {
	key := types.NamespacedName{Namespace: ns, Name: name}
	e := merge.Export{Cluster: m.id, Created: time.Now(), Slices: 1, Spec: mcsv1beta1.ServiceImportSpec{
		Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}}}
	source := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-1"}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:     []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}}}
	for _, c := range []client.Client{m.records, m.legacy} {
		rec, err := broker.Record(key, e)
		if err != nil {
			return err
		}
		if _, err := apply.ServiceImport(ctx, c, nil, rec); err != nil {
			return fmt.Errorf("%s publishing %s: %w", m.id, key, err)
		}
		if err := apply.Slices(ctx, c, nil, []discoveryv1.EndpointSlice{*broker.Slice(m.id, key, source)}); err != nil {
			return fmt.Errorf("%s publishing the endpoints of %s: %w", m.id, key, err)
		}
	}
	return nil
}

// brokerUsage is what the broker's API server used, and its metrics, at one moment.
type brokerUsage struct {
	at         time.Time
	cpu        float64 // seconds
	peakRSS    int64
	watchers   float64 // apiserver_longrunning_requests of verb WATCH: the watches it serves
	requests   float64 // apiserver_request_total, every verb
	storeBytes float64 // apiserver_storage_size_bytes: etcd's database
}

// usage reads the broker's usage now.
func (s *sim) usage(ctx context.Context) (brokerUsage, error) {
	u := brokerUsage{at: time.Now()}
	stat, err := proc.UsageOf(s.pid)
	if err != nil {
		return u, err
	}
	u.cpu, u.peakRSS = stat.CPUSeconds, stat.PeakRSS
	kube, err := kubernetes.NewForConfig(s.cfg)
	if err != nil {
		return u, err
	}
	body, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return u, fmt.Errorf("the broker's metrics: %w", err)
	}
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, _ := strings.Cut(line, "{")
		if !strings.Contains(line, "{") {
			name, rest, _ = strings.Cut(line, " ")
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			continue
		}
		switch name {
		case "apiserver_longrunning_requests":
			if strings.Contains(rest, `verb="WATCH"`) {
				u.watchers += v
			}
		case "apiserver_request_total":
			u.requests += v
		case "apiserver_storage_size_bytes":
			u.storeBytes = max(u.storeBytes, v)
		}
	}
	return u, nil
}

// apiServerPid finds the pid of the kube-apiserver that listens on host's port: the broker's.
func apiServerPid(host string) (int, error) {
	u, err := url.Parse(host)
	if err != nil || u.Port() == "" {
		return 0, fmt.Errorf("no port in %s (%v)", host, err)
	}
	port := u.Port()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && filepath.Base(args[0]) == "kube-apiserver" && slices.Contains(args, "--secure-port="+port) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no kube-apiserver with --secure-port=%s", port)
}
