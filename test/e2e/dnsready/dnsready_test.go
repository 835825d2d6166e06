// Package dnsready proves on a local fleet that a ServiceImport's Ready condition means its name resolves in the
// member's DNS: the moment an import turns Ready, the member's CoreDNS answers it, and while the member's DNS
// hangs an import stays Pending, saying why, and turns Ready once the server answers.
package dnsready

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/framework"
)

const (
	ns      = "shop"
	timeout = 60 * time.Second
)

func TestReadyMeansResolves(t *testing.T) {
	ctx := context.Background()
	f, _ := framework.StartTest(t, 2, 0)
	a, b := f.Member("cluster-a"), f.Member("cluster-b")
	for _, m := range f.Members {
		if err := m.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}

	// Every import is answered by cluster-a's DNS the moment it turns Ready: looked at every 5 ms, and asked once.
	var exported []string
	for i := range 8 {
		name := fmt.Sprintf("svc-%d", i)
		exportFromB(t, b, name, i%2 == 1, fmt.Sprintf("10.200.0.%d", 10+i))
		exported = append(exported, name)
	}
	answered := map[string]bool{}
	var failures []string
	err := poll.Until(ctx, 5*time.Millisecond, timeout, func() error {
		list := &mcsv1beta1.ServiceImportList{}
		if err := a.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		for i := range list.Items {
			si := &list.Items[i]
			if answered[si.Name] || !meta.IsStatusConditionTrue(si.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady)) {
				continue
			}
			answered[si.Name] = true
			if why := resolves(a, si); why != "" {
				failures = append(failures, why)
			}
			if c := meta.FindStatusCondition(si.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady)); c.Message != imports.ReadyResolvesMessage {
				failures = append(failures, fmt.Sprintf("%s: Ready message %q", si.Name, c.Message))
			}
		}
		if len(answered) < len(exported) {
			return fmt.Errorf("%d of %d imports Ready", len(answered), len(exported))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(failures) > 0 {
		t.Fatalf("imports Ready before cluster-a's DNS answered them:\n%s", strings.Join(failures, "\n"))
	}
	t.Logf("%d imports (ClusterSetIP and headless) answered by DNS the moment they turned Ready", len(exported))

	// With cluster-a's DNS hung, a new import is Pending and says why; the imports already Ready stay Ready.
	if err := a.PauseCoreDNS(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.ResumeCoreDNS() })
	exportFromB(t, b, "late", false, "10.200.1.10")
	var pending *metav1.Condition
	poll.T(t, timeout, "the late import Pending on cluster-a's DNS", func() error {
		si := &mcsv1beta1.ServiceImport{}
		if err := a.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "late"}, si); err != nil {
			return err
		}
		pending = meta.FindStatusCondition(si.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady))
		if pending == nil {
			return fmt.Errorf("no Ready condition yet (ips %v)", si.Spec.IPs)
		}
		return nil
	})
	if pending.Status != metav1.ConditionFalse || pending.Reason != string(mcsv1beta1.ServiceImportReasonPending) ||
		!strings.Contains(pending.Message, a.DNS) || !strings.Contains(pending.Message, names.ServiceDNSName(ns, "late")+".") {
		t.Fatalf("with cluster-a's DNS hung, the late import's Ready condition is %+v; want False/Pending naming %s and the name", pending, a.DNS)
	}
	t.Logf("with the DNS hung: %s: %s", pending.Reason, pending.Message)
	si := &mcsv1beta1.ServiceImport{}
	if err := a.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: exported[0]}, si); err != nil ||
		!meta.IsStatusConditionTrue(si.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady)) {
		t.Fatalf("an import Ready before the DNS hung: %v, %+v", err, si.Status.Conditions)
	}

	// Back up, the server answers and the import turns Ready, rechecked every second.
	if err := a.ResumeCoreDNS(); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	poll.T(t, timeout, "the late import Ready once cluster-a's DNS is back", func() error {
		if err := a.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "late"}, si); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(si.Status.Conditions, string(mcsv1beta1.ServiceImportConditionReady)) {
			return fmt.Errorf("conditions %+v", si.Status.Conditions)
		}
		return nil
	})
	t.Logf("the late import Ready %v after cluster-a's DNS was back", time.Since(up).Round(time.Millisecond))
	if why := resolves(a, si); why != "" {
		t.Fatal(why)
	}
}

// exportFromB creates and exports a selector-less Service in cluster-b with one ready endpoint at ip.
func exportFromB(t *testing.T, b *framework.Member, name string, headless bool, ip string) {
	t.Helper()
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	if headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-1", Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "dnsready.vksfleet.dev"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](80), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, obj := range []client.Object{svc, slice, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}} {
		if err := b.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
}

// resolves asks m's DNS for si's name once and says what is wrong with the answer: a ClusterSetIP import must
// answer exactly its IPs, a headless one some address.
func resolves(m *framework.Member, si *mcsv1beta1.ServiceImport) string {
	name := names.ServiceDNSName(ns, si.Name) + "."
	got, rcode, err := m.Addresses(name, dns.TypeA)
	switch {
	case err != nil:
		return fmt.Sprintf("%s: %v", name, err)
	case rcode != dns.RcodeSuccess:
		return fmt.Sprintf("%s: %s", name, dns.RcodeToString[rcode])
	case si.Spec.Type == mcsv1beta1.ClusterSetIP && !slices.Equal(got, slices.Sorted(slices.Values(si.Spec.IPs))):
		return fmt.Sprintf("%s: answered %v, the import's IPs are %v", name, got, si.Spec.IPs)
	case len(got) == 0:
		return fmt.Sprintf("%s: no address", name)
	}
	return ""
}
