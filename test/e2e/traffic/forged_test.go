package traffic

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/workload"
	"vksfleet.dev/fleet/test/framework"
)

// testForgedRecord: the attack of issue 37, with traffic. A service is exported from B, then C; C's controller
// stops and an attacker holding C's broker credential (read from C's own Secret, as one who took C over would)
// rewrites C's record as the oldest export, headless, on another port and of another IP family. A client in A that
// calls the service every 50 ms loses no request, and A's import keeps its type, port and ClusterSetIP. Then the
// record gets values no Service may have, and is refused whole.
func (e *env) testForgedRecord(t *testing.T) {
	ctx := context.Background()
	e.deployExported(t, "forged", false, e.b)
	e.waitImportedEndpoints(t, e.a, "forged", map[string]int{"cluster-b": 2})
	// C's record must be younger than B's by more than a forger may claim to predate its record by, or the forgery
	// would win fairly.
	bRecord := &mcsv1beta1.ServiceImport{}
	if err := e.f.Broker.Records.Get(ctx, types.NamespacedName{Namespace: names.BrokerNamespace(e.b.ID),
		Name: names.RecordName(ns, "forged")}, bRecord); err != nil {
		t.Fatal(err)
	}
	poll.T(t, timeout, "B's record older than the precedence allowance", func() error {
		if age := time.Since(bRecord.CreationTimestamp.Time); age <= broker.PrecedenceAllowance+time.Second {
			return fmt.Errorf("B's record is %s old", age)
		}
		return nil
	})
	e.deployExported(t, "forged", false, e.c)
	e.waitImportIP(t, e.a, "forged")
	e.waitImportedEndpoints(t, e.a, "forged", map[string]int{"cluster-b": 2, "cluster-c": 2})
	derived := e.derivedUID(t, "forged")
	before := &mcsv1beta1.ServiceImport{}
	if err := e.a.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "forged"}, before); err != nil {
		t.Fatal(err)
	}

	pod := workload.LoopPod("forged-client", ns,
		fmt.Sprintf("%s:%d", names.ServiceDNSName(ns, "forged"), workload.EchoPort), 50*time.Millisecond, 10*time.Minute)
	loop := e.startLoop(t, pod)
	var from int64
	poll.T(t, timeout, "the loop answered by both clusters", func() error {
		reqs := loop.Requests(0, 0)
		by := answeredBy(reqs)
		if by["cluster-b"] == 0 || by["cluster-c"] == 0 {
			return fmt.Errorf("answered by %v", by)
		}
		from = reqs[len(reqs)-1].StartMs + 1
		return nil
	})

	if err := e.c.StopController(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.c.StartController(); err != nil {
			t.Error(err)
		}
	}()
	attacker := e.memberIdentity(t, e.c)
	key := types.NamespacedName{Namespace: names.BrokerNamespace(e.c.ID), Name: names.RecordName(ns, "forged")}
	e.forge(t, attacker, key, func(r *mcsv1beta1.ServiceImport) {
		r.Annotations[names.AnnotationExportCreated] = "1970-01-01T00:00:00Z"
		r.Spec.Type = mcsv1beta1.Headless
		r.Spec.Ports = []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 81}}
		r.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	})
	// B's controller reads the same broker as A's: once B reports the forged record's disagreement, A has it too.
	e.waitExportConflict(t, e.b, "forged", "TypeConflict")
	e.holdsImport(t, loop, before, derived, "a forged oldest headless record of another port and family")

	e.forge(t, attacker, key, func(r *mcsv1beta1.ServiceImport) {
		r.Spec.Type = mcsv1beta1.ClusterSetIP
		r.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		r.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: new(int32)}}
	})
	poll.T(t, timeout, "cluster-a's controller refuses the record", func() error {
		if n, err := e.a.ControllerMetric("mcs_controller_refused_total", map[string]string{"reason": "InvalidSessionAffinity"}); err != nil || n == 0 {
			return fmt.Errorf("refusals %v %v", n, err)
		}
		return nil
	})
	e.holdsImport(t, loop, before, derived, "a record with a session affinity timeout of 0")

	failures := workload.Failures(loop.Requests(from, 0))
	t.Logf("%d requests from cluster-a during the attack, %d failed", len(loop.Requests(from, 0)), len(failures))
	if len(failures) > 0 {
		t.Errorf("requests failed during the attack: %v", failures)
	}
}

// memberIdentity is a broker client with the credential m's controller reads, from m's own Secret.
func (e *env) memberIdentity(t *testing.T, m *framework.Member) client.Client {
	t.Helper()
	secret := &corev1.Secret{}
	if err := m.Client.Get(context.Background(), framework.BrokerSecret, secret); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data["kubeconfig"])
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: e.f.Broker.Records.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// forge rewrites a broker record with the attacker's client.
func (e *env) forge(t *testing.T, attacker client.Client, key types.NamespacedName, edit func(*mcsv1beta1.ServiceImport)) {
	t.Helper()
	rec := &mcsv1beta1.ServiceImport{}
	if err := attacker.Get(context.Background(), key, rec); err != nil {
		t.Fatal(err)
	}
	edit(rec)
	if err := attacker.Update(context.Background(), rec); err != nil {
		t.Fatalf("forging %s: %v", key, err)
	}
}

// waitExportConflict waits until m's ServiceExport of svc reports the conflict reason.
func (e *env) waitExportConflict(t *testing.T, m *framework.Member, svc, reason string) {
	t.Helper()
	poll.T(t, timeout, m.Name+"'s export of "+svc+" reports "+reason, func() error {
		se := &mcsv1beta1.ServiceExport{}
		if err := m.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: svc}, se); err != nil {
			return err
		}
		c := meta.FindStatusCondition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionConflict))
		if c == nil || !strings.Contains(c.Reason, reason) {
			return fmt.Errorf("Conflict condition %+v", c)
		}
		return nil
	})
}

// derivedUID is the UID of A's derived Service of svc: a Service deleted and made again has another.
func (e *env) derivedUID(t *testing.T, svc string) types.UID {
	t.Helper()
	si := &mcsv1beta1.ServiceImport{}
	if err := e.a.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: svc}, si); err != nil {
		t.Fatal(err)
	}
	list := &corev1.ServiceList{}
	if err := e.a.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		for _, o := range s.OwnerReferences {
			if o.UID == si.UID {
				return s.UID
			}
		}
	}
	t.Fatalf("no derived Service of %s in cluster-a", svc)
	return ""
}

// holdsImport checks, once the loop has made 100 requests more, that A's import still has the type, ports and
// ClusterSetIPs it had before the attack, and the same derived Service.
func (e *env) holdsImport(t *testing.T, loop *workload.Loop, before *mcsv1beta1.ServiceImport, derived types.UID, after string) {
	t.Helper()
	since := time.Now().UnixMilli()
	poll.T(t, timeout, "100 requests after "+after, func() error {
		if n := len(loop.Requests(since, 0)); n < 100 {
			return fmt.Errorf("%d requests so far", n)
		}
		return nil
	})
	si := &mcsv1beta1.ServiceImport{}
	if err := e.a.Client.Get(context.Background(), client.ObjectKeyFromObject(before), si); err != nil {
		t.Fatal(err)
	}
	if si.Spec.Type != before.Spec.Type || !equality.Semantic.DeepEqual(si.Spec.Ports, before.Spec.Ports) ||
		!slices.Equal(si.Spec.IPs, before.Spec.IPs) {
		t.Errorf("after %s cluster-a imports %s as %s, ports %+v, IPs %v; want %s, %+v, %v", after, before.Name,
			si.Spec.Type, si.Spec.Ports, si.Spec.IPs, before.Spec.Type, before.Spec.Ports, before.Spec.IPs)
	}
	if uid := e.derivedUID(t, before.Name); uid != derived {
		t.Errorf("after %s cluster-a's derived Service of %s was made again", after, before.Name)
	}
}
