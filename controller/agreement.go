package controller

import (
	"context"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"vksfleet.dev/fleet/controller/admit"
	"vksfleet.dev/fleet/controller/reach"
	"vksfleet.dev/fleet/mcs/names"
)

// uncorroboratedTotal counts the verdicts of a loss the elected replica did not act on for want of a second node.
var uncorroboratedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "mcs_controller_member_unreachable_uncorroborated_total",
	Help: "Times the elected controller replica of observer_cluster_id found a member unreachable while no replica on " +
		"another node did (one replica, both on one node, or the other's verdict older than 2 s): the member's " +
		"endpoints stay in use (fail open).",
}, []string{"observer_cluster_id", "cluster_id"})

func init() { metrics.Registry.MustRegister(uncorroboratedTotal) }

// Timing of the replicas' records. A replica writes its record when its verdicts change and at least every
// replicaHeartbeat, so that a record older than reach.Agreement is from a replica that stopped. A replica's probe
// addresses go on the member's Lease while its record is younger than replicaAddressAge: a replica that has not
// written for that long is gone or cut off from its API server.
const (
	replicaHeartbeat  = time.Second
	replicaAddressAge = 10 * time.Second
)

// replicaRecordPrefix starts the name of each replica's record, followed by its pod's name.
const replicaRecordPrefix = "mcs-probe-"

// replicas writes this controller replica's record, a Lease in the controller's namespace of the member cluster
// (names.LabelProbeReplica): its node, the members its own probes find unreachable and its probe addresses, with
// the time it wrote as the renew time. It reads the other replicas' records from the member's cache.
type replicas struct {
	client    client.Client // the member's: writes go to the API server, reads to the cache
	namespace string
	name      string // this replica's record
	pod       string
	node      string
	addrs     []string                // this replica's probe addresses, host:port
	owner     []metav1.OwnerReference // its pod, so that the record goes with it
	// dns is this member's DNS Service (Options.DNSAddress, when it names one): its pods, ours, go on the Lease
	// beside the replicas. They outlive the controller's pods, which a stopped or crash-looping controller, or a
	// rollout, takes away while the Lease still names them: without them, a member whose controller merely went
	// would look cut off until its Lease lapsed.
	dns     types.NamespacedName
	dnsPort string

	written *coordinationv1.Lease // as last written; nil before the first write and after a failed one
}

// replicaOf describes this replica from what the Deployment gives it (the downward API: POD_NAME, POD_UID,
// NODE_NAME, POD_IPS), its record in namespace, and its probe addresses: its pod's addresses on the port the
// health probes are served on (healthAddr, Options.HealthProbeBindAddress), which every replica listens on as
// soon as it starts. nil without a namespace.
func replicaOf(c client.Client, namespace, healthAddr string, env func(string) string) *replicas {
	if namespace == "" {
		return nil
	}
	pod := env("POD_NAME")
	if pod == "" {
		pod, _ = os.Hostname()
	}
	r := &replicas{client: c, namespace: namespace, name: replicaRecordPrefix + pod, pod: pod, node: env("NODE_NAME")}
	if uid := env("POD_UID"); uid != "" {
		r.owner = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod, UID: types.UID(uid)}}
	}
	if port := probePort(healthAddr); port != "" {
		for ip := range strings.SplitSeq(env("POD_IPS"), ",") {
			if ip != "" {
				r.addrs = append(r.addrs, net.JoinHostPort(ip, port))
			}
		}
		r.addrs, _ = admit.ProbeAddresses(strings.Join(r.addrs, ","))
	}
	return r
}

// probePort is the port of a bind address that other members can connect to: one bound on every address, ""
// for none (unset, "0", or bound to one address, such as loopback).
func probePort(bind string) string {
	host, port, err := net.SplitHostPort(bind)
	if err != nil || port == "0" {
		return ""
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return ""
	}
	if host != "" {
		if ip, err := netip.ParseAddr(host); err != nil || !ip.IsUnspecified() {
			return ""
		}
	}
	return port
}

// publish writes this replica's record at now when the members its probes find unreachable or reachable changed,
// or replicaHeartbeat after its last write.
func (r *replicas) publish(ctx context.Context, unreachable, reachable []string, now time.Time) error {
	value, judged := strings.Join(unreachable, ","), strings.Join(reachable, ",")
	if w := r.written; w != nil && w.Annotations[names.AnnotationUnreachable] == value && w.Annotations[names.AnnotationReachable] == judged &&
		w.Spec.RenewTime != nil && now.Sub(w.Spec.RenewTime.Time) < replicaHeartbeat {
		return nil
	}
	lease := r.written
	create := false
	if lease == nil {
		lease = &coordinationv1.Lease{}
		err := r.client.Get(ctx, client.ObjectKey{Namespace: r.namespace, Name: r.name}, lease)
		switch {
		case apierrors.IsNotFound(err):
			create = true
			lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: r.namespace, Name: r.name}}
		case err != nil:
			return err
		}
	}
	lease.Labels = map[string]string{names.LabelManagedBy: names.ManagedBy, names.LabelProbeReplica: "true"}
	lease.OwnerReferences = r.owner
	lease.Annotations = map[string]string{names.AnnotationNode: r.node, names.AnnotationReachable: judged}
	if value != "" {
		lease.Annotations[names.AnnotationUnreachable] = value
	}
	if len(r.addrs) > 0 {
		lease.Annotations[names.AnnotationProbeAddresses] = strings.Join(r.addrs, ",")
	}
	lease.Spec = coordinationv1.LeaseSpec{
		HolderIdentity:       ptr.To(r.pod),
		LeaseDurationSeconds: ptr.To(int32(reach.Agreement / time.Second)),
		RenewTime:            &metav1.MicroTime{Time: now},
	}
	var err error
	if create {
		err = r.client.Create(ctx, lease)
	} else {
		err = r.client.Update(ctx, lease)
	}
	r.written = nil
	if err == nil {
		r.written = lease
	}
	return err
}

// peers returns the other replicas' verdicts from their records, and the probe addresses of every replica whose
// record is younger than replicaAddressAge at now, this one's included.
func (r *replicas) peers(ctx context.Context, now time.Time) ([]reach.Verdict, []string, error) {
	list := &coordinationv1.LeaseList{}
	if err := r.client.List(ctx, list, client.InNamespace(r.namespace), client.MatchingLabels{names.LabelProbeReplica: "true"},
		client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, err
	}
	verdicts, addrs := replicaVerdicts(list.Items, r.name, now)
	addrs = append(addrs, r.addrs...)
	if r.dns.Name != "" {
		slices := &discoveryv1.EndpointSliceList{}
		if err := r.client.List(ctx, slices, client.InNamespace(r.dns.Namespace),
			client.MatchingLabels{discoveryv1.LabelServiceName: r.dns.Name}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, nil, err
		}
		addrs = append(addrs, dnsAddresses(slices.Items, r.dnsPort)...)
	}
	addrs, _ = admit.ProbeAddresses(strings.Join(addrs, ","))
	return verdicts, addrs, nil
}

// dnsService is the Service a DNS address names, "<service>.<namespace>.svc[.<domain>][.]:<port>", with the port;
// ok is false for an address that names none (an IP address).
func dnsService(addr string) (svc types.NamespacedName, port string, ok bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return svc, "", false
	}
	labels := strings.Split(strings.TrimSuffix(host, "."), ".")
	if len(labels) < 3 || labels[2] != "svc" {
		return svc, "", false
	}
	return types.NamespacedName{Namespace: labels[1], Name: labels[0]}, port, true
}

// dnsAddresses are the ready endpoints of the DNS Service's slices, on port: the DNS address's, which our CoreDNS
// pods listen on too, over TCP as over UDP.
func dnsAddresses(list []discoveryv1.EndpointSlice, port string) []string {
	var addrs []string
	for _, s := range list {
		for _, e := range s.Endpoints {
			if !ptr.Deref(e.Conditions.Ready, true) {
				continue
			}
			for _, a := range e.Addresses {
				addrs = append(addrs, net.JoinHostPort(a, port))
			}
		}
	}
	return addrs
}

// replicaVerdicts reads the replicas' records but self's: their verdicts, and the probe addresses of those younger
// than replicaAddressAge at now.
func replicaVerdicts(records []coordinationv1.Lease, self string, now time.Time) (verdicts []reach.Verdict, addrs []string) {
	for _, l := range records {
		if l.Name == self || l.Spec.RenewTime == nil {
			continue
		}
		at := l.Spec.RenewTime.Time
		v := reach.Verdict{Node: l.Annotations[names.AnnotationNode], At: at}
		if u := l.Annotations[names.AnnotationUnreachable]; u != "" {
			v.Unreachable = strings.Split(u, ",")
		}
		if r, ok := l.Annotations[names.AnnotationReachable]; ok {
			v.ListsReachable = true
			if r != "" {
				v.Reachable = strings.Split(r, ",")
			}
		}
		verdicts = append(verdicts, v)
		if a := l.Annotations[names.AnnotationProbeAddresses]; a != "" && now.Sub(at) < replicaAddressAge {
			addrs = append(addrs, strings.Split(a, ",")...)
		}
	}
	return verdicts, addrs
}

// probeAddresses holds the replicas' probe addresses for this member's Lease (broker.Renewer.ProbeAddresses),
// which every run's probe refreshes.
type probeAddresses struct {
	mu    sync.Mutex
	addrs []string
}

func (a *probeAddresses) get() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.addrs
}

func (a *probeAddresses) set(addrs []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.addrs = addrs
}

// agree publishes this replica's verdicts, settles every member's State with the other replicas'
// (reach.Tracker.Agree) and, on the elected replica, brings back the services of those whose State changed. A
// member found unreachable here while no other node agrees is logged and counted once, when that starts.
func (p *dataPlaneProbe) agree(ctx context.Context, now time.Time) {
	var peers []reach.Verdict
	node := ""
	if p.replicas != nil {
		node = p.replicas.node
		unreachable, reachable := p.tracker.Own()
		if err := p.replicas.publish(ctx, unreachable, reachable, now); err != nil && ctx.Err() == nil {
			p.log.Error(err, "writing this replica's probe verdicts")
		}
		verdicts, addrs, err := p.replicas.peers(ctx, now)
		if err != nil && ctx.Err() == nil {
			p.log.Error(err, "reading the other replicas' probe verdicts")
		}
		peers = verdicts
		if p.addresses != nil && err == nil {
			p.addresses.set(addrs)
		}
	}
	// Every replica settles the States, the elected one and the others alike: a replica that takes the lead
	// reconciles at once, and with States never settled it would find every member Unknown and import a member
	// both nodes found cut off, until its first round as leader.
	changed := p.tracker.Agree(node, peers, now)
	if !p.leading() {
		return
	}
	for _, id := range changed {
		p.changed(ctx, id)
	}
	alone := p.tracker.Uncorroborated()
	p.mu.Lock()
	before := p.uncorroborated
	p.uncorroborated = alone
	p.mu.Unlock()
	for _, id := range alone {
		if !slices.Contains(before, id) {
			uncorroboratedTotal.WithLabelValues(p.self, id).Inc()
			p.log.Info("member unreachable from this replica, but no replica on another node agrees: its endpoints stay "+
				"in use", "member", id, "node", node)
		}
	}
}
