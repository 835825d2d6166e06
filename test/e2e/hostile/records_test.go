package hostile

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/cli/install"
	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/plugin/mcstest"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/framework"
)

// The attacks of issue 37 on what a record says (review of 2026-11-28, #2, #12, #16, #17). Each is run with
// mallory's own broker identity, in mallory's own namespace: all a member may do.

// webVIPs returns each member's ClusterSetIPs of web.
func (e *env) webVIPs(t *testing.T) map[string][]string {
	t.Helper()
	vips := map[string][]string{}
	for _, m := range e.f.Members {
		si := &mcsv1beta1.ServiceImport{}
		if err := m.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "web"}, si); err != nil {
			t.Fatal(err)
		}
		vips[m.Name] = si.Spec.IPs
	}
	return vips
}

// webHolds checks that every member imports web as the honest exports make it, on port 80, with the ClusterSetIPs
// it had before the attack.
func (e *env) webHolds(t *testing.T, before map[string][]string, after string) {
	t.Helper()
	e.healthy(t, after)
	for _, m := range e.f.Members {
		si := &mcsv1beta1.ServiceImport{}
		if err := m.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "web"}, si); err != nil {
			t.Fatal(err)
		}
		if si.Spec.Ports[0].Port != 80 || !slices.Equal(si.Spec.IPs, before[m.Name]) {
			t.Errorf("after %s %s imports web on port %d with IPs %v, want 80 and %v", after, m.Name,
				si.Spec.Ports[0].Port, si.Spec.IPs, before[m.Name])
		}
	}
}

// waitConflict waits until cluster-a's export of web reports reason among its conflicts: cluster-a's controller has
// merged mallory's record, and the other members', reading the same broker, have it too.
func (e *env) waitConflict(t *testing.T, reason string) {
	t.Helper()
	poll.T(t, timeout, "cluster-a's export of web reports "+reason, func() error {
		se := &mcsv1beta1.ServiceExport{}
		if err := e.a.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "web"}, se); err != nil {
			return err
		}
		c := meta.FindStatusCondition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionConflict))
		if c == nil || !strings.Contains(c.Reason, reason) {
			return fmt.Errorf("Conflict condition %+v", c)
		}
		return nil
	})
}

// forgedAge: review #2b and the measured attack of issue 37. Mallory's record of web claims an export time a day
// old (its broker record is new), is headless and serves http on 81. It used to win the type and the port
// everywhere; it ranks by its broker record's age now, so web keeps its type, port and ClusterSetIPs.
func (e *env) forgedAge(t *testing.T) {
	before := e.webVIPs(t)
	undo := e.publish(t, mallory, names.BrokerNamespace(mallory), "web", func(r *mcsv1beta1.ServiceImport) {
		r.Annotations[names.AnnotationExportCreated] = "1970-01-01T00:00:00Z"
		r.Spec.Type = mcsv1beta1.Headless
		r.Spec.Ports = []mcsv1beta1.ServicePort{mcstest.Port("http", corev1.ProtocolTCP, 81)}
	}, ipv4Slice("aged", mcstest.Endpoint("10.66.7.1", "", true)))
	e.waitConflict(t, "TypeConflict")
	e.webHolds(t, before, "a record claiming to be the oldest")
	undo()
	e.waitEndpoints(t, "web", map[string]int{"cluster-a": 2, "cluster-c": 1})
}

// disjointFamily: review #2a. Mallory's record of web has only IPv6, which no honest export has: the family
// intersection would be empty, and the derived Service, with its ClusterSetIP, was deleted in every member. It is
// an IPFamilyConflict now, and the VIP stays.
func (e *env) disjointFamily(t *testing.T) {
	before := e.webVIPs(t)
	undo := e.publish(t, mallory, names.BrokerNamespace(mallory), "web", func(r *mcsv1beta1.ServiceImport) {
		r.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	})
	e.waitConflict(t, "IPFamilyConflict")
	e.webHolds(t, before, "a record of another IP family")
	undo()
}

// invalidFields: review #2. Records whose fields no Service may have, and the broker's CRD does not refuse, are
// refused whole, each with its reason; one of them (a session affinity timeout of 0) used to make every member's
// API server refuse the derived Service.
func (e *env) invalidFields(t *testing.T) {
	for _, c := range []struct {
		reason string
		edit   func(*mcsv1beta1.ServiceImport)
	}{
		{"InvalidSessionAffinity", func(r *mcsv1beta1.ServiceImport) {
			r.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			r.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](0)}}
		}},
		{"InvalidIPFamilies", func(r *mcsv1beta1.ServiceImport) { r.Spec.IPFamilies = []corev1.IPFamily{"IPv5"} }},
		{"InvalidTrafficDistribution", func(r *mcsv1beta1.ServiceImport) { r.Spec.TrafficDistribution = ptr.To("Anywhere") }},
	} {
		before := e.webVIPs(t)
		undo := e.publish(t, mallory, names.BrokerNamespace(mallory), "web", c.edit,
			ipv4Slice("fields", mcstest.Endpoint("10.66.7.2", "", true)))
		e.waitRefused(t, c.reason)
		e.webHolds(t, before, "a record refused with "+c.reason)
		e.waitEndpoints(t, "web", map[string]int{"cluster-a": 2, "cluster-c": 1})
		undo()
	}
}

// importDoor: review #12. Records for kube-system and default (which every cluster has), and one whose service
// name no Service may have, are refused once each: nothing is imported, in no member, and no write is retried.
func (e *env) importDoor(t *testing.T) {
	ctx := context.Background()
	var undo []func()
	for _, key := range []types.NamespacedName{{Namespace: metav1.NamespaceSystem, Name: "evil"}, {Namespace: metav1.NamespaceDefault, Name: "evil"}} {
		undo = append(undo, e.publishKey(t, mallory, names.BrokerNamespace(mallory), key, nil,
			ipv4Slice("door-"+key.Namespace, mcstest.Endpoint("10.66.7.3", "", true))))
	}
	undo = append(undo, e.publish(t, mallory, names.BrokerNamespace(mallory), "webone", func(r *mcsv1beta1.ServiceImport) {
		r.Labels[mcsv1beta1.LabelServiceName] = "Web_1"
	}))
	defer func() {
		for _, u := range undo {
			u()
		}
	}()
	e.waitRefused(t, "NamespaceNotAllowed")
	e.waitRefused(t, "InvalidServiceName")
	for _, m := range e.f.Members {
		for _, key := range []types.NamespacedName{{Namespace: metav1.NamespaceSystem, Name: "evil"},
			{Namespace: metav1.NamespaceDefault, Name: "evil"}, {Namespace: ns, Name: "Web_1"}} {
			err := m.Client.Get(ctx, key, &mcsv1beta1.ServiceImport{})
			if client.IgnoreNotFound(err) != nil || err == nil {
				t.Errorf("%s imports %s (%v)", m.Name, key, err)
			}
		}
	}
	e.healthy(t, "records for kube-system, default and an invalid name")
}

// forgedSliceCount: review #16. Mallory's record declares a million slices and publishes one; the import waited
// for the rest forever (Ready=False/Pending). A count past the cap is not waited for: the import turns Ready.
// One within the cap, never met, turns Ready=False/EndpointSlicesMissing, not Pending for ever.
func (e *env) forgedSliceCount(t *testing.T) {
	for _, c := range []struct {
		svc, count, reason string
		status             metav1.ConditionStatus
	}{
		{"million", "1000000", "", metav1.ConditionTrue},
		{"ninehundred", "999", imports.ReasonEndpointSlicesMissing, metav1.ConditionFalse},
	} {
		defer e.publish(t, mallory, names.BrokerNamespace(mallory), c.svc, func(r *mcsv1beta1.ServiceImport) {
			r.Annotations[names.AnnotationSlices] = c.count
		}, ipv4Slice(c.svc, mcstest.Endpoint("10.66.7.4", "", true)))()
		poll.T(t, timeout, c.svc+" imported into cluster-b, Ready "+string(c.status), func() error {
			si := &mcsv1beta1.ServiceImport{}
			if err := e.b.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: c.svc}, si); err != nil {
				return err
			}
			ready := meta.FindStatusCondition(si.Status.Conditions, "Ready")
			if ready == nil || ready.Status != c.status || (c.reason != "" && ready.Reason != c.reason) {
				return fmt.Errorf("Ready condition %+v", ready)
			}
			return nil
		})
	}
}

// publicPTR: review #17. A headless export's endpoint at a public address (a namespace user may write any address
// into an EndpointSlice) is answered forward, but no member's DNS answers its reverse name with a clusterset.local
// name: only the private ranges are reverse zones of the clusterset by default. db's private address still is.
func (e *env) publicPTR(t *testing.T) {
	defer e.publish(t, mallory, names.BrokerNamespace(mallory), "pub", func(r *mcsv1beta1.ServiceImport) {
		r.Spec.Type = mcsv1beta1.Headless
	}, ipv4Slice("pub", mcstest.Endpoint("203.0.113.7", "p-0", true)))()
	poll.T(t, timeout, "pub answers its public address", func() error {
		for _, m := range e.f.Members {
			if ips, _, err := m.Addresses("pub."+ns+zone, dns.TypeA); err != nil || !slices.Equal(ips, []string{"203.0.113.7"}) {
				return fmt.Errorf("%s: %v %v", m.Name, ips, err)
			}
		}
		return nil
	})
	for _, m := range e.f.Members {
		// cluster-a's kubernetes plugin answers db-0's address first, with its cluster.local name: the other members
		// import db, and answer it with its clusterset.local name.
		for addr, want := range map[string]bool{"7.113.0.203.in-addr.arpa.": false, "1.1.1.10.in-addr.arpa.": m != e.a} {
			msg, err := m.Query(addr, dns.TypePTR)
			if err != nil {
				t.Fatalf("%s: PTR %s: %v", m.Name, addr, err)
			}
			got := slices.ContainsFunc(msg.Answer, func(rr dns.RR) bool {
				ptr, ok := rr.(*dns.PTR)
				return ok && strings.HasSuffix(ptr.Ptr, "."+names.DNSZone+".")
			})
			if got != want {
				t.Errorf("%s: PTR %s answered with a clusterset name: %v, want %v (%v)", m.Name, addr, got, want, msg.Answer)
			}
		}
	}
}

// evicted: review #14. An operator evicts mallory with the broker-info alone (`kubectl mcs broker evict`): every
// honest member withdraws its endpoints within 2 s of the eviction, and its grants are gone.
func (e *env) evicted(t *testing.T) {
	ctx := context.Background()
	e.publish(t, mallory, names.BrokerNamespace(mallory), "gone", nil, ipv4Slice("gone", mcstest.Endpoint("10.66.7.5", "", true)))
	imported := func(m *framework.Member) (bool, error) {
		list := &discoveryv1.EndpointSliceList{}
		if err := m.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{mcsv1beta1.LabelServiceName: "gone",
			discoveryv1.LabelManagedBy: names.ManagedBy}); err != nil {
			return false, err
		}
		return len(list.Items) > 0, nil
	}
	poll.T(t, timeout, "gone imported by every honest member", func() error {
		for _, m := range e.f.Members {
			if ok, err := imported(m); !ok || err != nil {
				return fmt.Errorf("%s: %v", m.Name, err)
			}
		}
		return nil
	})
	start := time.Now()
	evicted := make(chan error, 1)
	go func() { evicted <- install.Evict(ctx, e.info, mallory, time.Minute, io.Discard) }()
	var withdrawn time.Duration
	poll.T(t, timeout, "gone withdrawn by every honest member", func() error {
		for _, m := range e.f.Members {
			if ok, err := imported(m); ok || err != nil {
				return fmt.Errorf("%s still imports it (%v)", m.Name, err)
			}
		}
		withdrawn = time.Since(start)
		return nil
	})
	if err := <-evicted; err != nil {
		t.Fatal(err)
	}
	t.Logf("mallory evicted: its endpoints withdrawn by every honest member %s after the eviction began", withdrawn.Round(10*time.Millisecond))
	if withdrawn > 2*time.Second {
		t.Errorf("mallory's endpoints withdrawn %s after the eviction began, want within 2 s", withdrawn)
	}
	// mallory acts here by impersonation, which outlives its ServiceAccount: what is left to show is that its grants
	// went. That a token of an evicted member is refused (401) is test/e2e/manifests' TestJoiner.
	if err := e.brokerC.List(ctx, &mcsv1beta1.ServiceImportList{}, client.InNamespace(names.BrokerNamespace(mallory))); !apierrors.IsForbidden(err) {
		t.Errorf("mallory's identity after the eviction: %v, want Forbidden", err)
	}
	e.healthy(t, "mallory's eviction")
}
