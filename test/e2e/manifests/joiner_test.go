package manifests

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/cli/install"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/poll"
)

// TestJoiner prepares a broker with `kubectl mcs broker init` and, with the joiner's own token from the
// broker-info, does the broker's part of join for two members (their identities and a credential each). It
// checks that the joiner and a member's credential can do what join, rotate, a renewal and evict need and nothing
// else, through RBAC and the broker's admission policies; every write it expects refused is a dry run, so that a
// wrongly granted one changes nothing. Then it evicts one member with the joiner's token alone: its tokens, and
// one its credential asked for, are refused (401), and nothing of it is left on the broker. Then init
// --rotate-joiner revokes the joiner's token; `kubectl mcs unjoin --broker-only` takes out the other member, whose
// cluster is gone (uninstall_test.go); and broker uninstall takes the clusterset off the broker, after which init
// prepares it again.
func TestJoiner(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	cs, err := clusterset.Start(ctx, clusterset.Options{Members: []string{"cluster-a"}})
	if err != nil {
		t.Fatalf("starting the clusterset: %v", err)
	}
	t.Cleanup(func() {
		if err := cs.Stop(); err != nil {
			t.Errorf("stopping the clusterset: %v", err)
		}
	})
	t.Logf("clusterset started in %v", time.Since(start).Round(time.Millisecond))
	admin := cs.Broker.Client
	var out strings.Builder
	info, err := install.BrokerInit(ctx, cs.Broker.Config, install.InitOptions{ClusterSet: "clusterset", TokenExpiration: time.Hour}, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("broker init:\n%s", out.String())

	// What join does on the broker, as the joiner.
	ids := []string{"joined-a", "joined-b"}
	creds := map[string]credential{}
	for _, id := range ids {
		if err := install.BrokerIdentity(ctx, info, id); err != nil {
			t.Fatalf("the broker identity of %s, as the joiner: %v", id, err)
		}
		kubeconfig, name, err := install.MintCredential(ctx, info, id, time.Hour)
		if err != nil {
			t.Fatalf("a credential of %s, as the joiner: %v", id, err)
		}
		creds[id] = newCredential(t, kubeconfig, name)
	}
	// Run GrantReads again for a, as a second join of a does, which must change nothing but be allowed.
	if _, err := install.GrantReads(ctx, newClient(t, info.Config()), ids[0]); err != nil {
		t.Fatalf("granting reads again, as the joiner: %v", err)
	}
	a, b := creds[ids[0]], creds[ids[1]]
	nsA, nsB := names.BrokerNamespace(ids[0]), names.BrokerNamespace(ids[1])

	// Objects an administrator owns, for the joiner to be refused.
	const probe = "joiner-probe"
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: probe}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: probe}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: probe}},
		// The broker runs no ServiceAccount controller; a real one makes every namespace's default.
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "default"}},
	} {
		if err := admin.Create(ctx, o); client.IgnoreAlreadyExists(err) != nil {
			t.Fatal(err)
		}
	}

	joiner, joinerKube := newClient(t, info.Config()), newKube(t, info.Config())
	memberA, memberKubeA := newClient(t, a.config), newKube(t, a.config)
	recordsA, err := client.New(a.config, client.Options{Scheme: cs.Broker.Records.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	dry := client.DryRunAll
	token := func(kube kubernetes.Interface, ns, sa, boundTo string, life time.Duration) func() error {
		return func() error {
			req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(life / time.Second))}}
			if boundTo != "" {
				req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: boundTo}
			}
			_, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, req, metav1.CreateOptions{})
			return err
		}
	}
	binding := func(ns, role string, subject rbacv1.Subject) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: probe},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{subject},
		}
	}
	group := func(name string) rbacv1.Subject {
		return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: name}
	}
	serviceAccount := func(ns, name string) rbacv1.Subject {
		return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
	}
	week := 7 * 24 * time.Hour

	// A credential's permissions come through bindings, which the RBAC authorizer sees through an informer.
	poll.T(t, 30*time.Second, "a's credential reads b's records", func() error {
		return recordsA.List(ctx, &coordinationv1.LeaseList{}, client.InNamespace(nsB))
	})
	checks := []struct {
		what      string
		do        func() error
		forbidden bool
	}{
		// What join, rotate and evict need.
		{"the joiner applies a member's namespace", func() error {
			return joiner.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: names.BrokerNamespace("joined-c")}}, dry)
		}, false},
		{"the joiner asks for a token of a's credential, bound to its Secret", token(joinerKube, nsA, a.name, a.name, time.Hour), false},
		{"the joiner lets a read b's namespace", func() error {
			return joiner.Create(ctx, binding(nsB, "mcs-broker-reader", group("system:serviceaccounts:"+nsA)), dry)
		}, false},
		{"the joiner deletes a credential's ServiceAccount", func() error {
			return joiner.Delete(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: a.name}}, dry)
		}, false},
		{"the joiner deletes a credential's Secret", func() error {
			return joiner.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: a.name}}, dry)
		}, false},
		{"the joiner deletes a member's records, slices and Lease (evict)", func() error {
			for _, obj := range []client.Object{&mcsv1beta1.ServiceImport{}, &discoveryv1.EndpointSlice{}, &coordinationv1.Lease{}} {
				if err := joiner.DeleteAllOf(ctx, obj, client.InNamespace(nsA), dry); err != nil {
					return err
				}
			}
			return nil
		}, false},
		// The rest of the broker.
		{"the joiner deletes the EndpointSlices of default (the broker's own kubernetes Service)", func() error {
			return joiner.DeleteAllOf(ctx, &discoveryv1.EndpointSlice{}, client.InNamespace(metav1.NamespaceDefault), dry)
		}, true},
		{"the joiner asks for a token of a kube-system ServiceAccount", token(joinerKube, metav1.NamespaceSystem, probe, "", time.Hour), true},
		{"the joiner deletes an ordinary namespace", func() error {
			return joiner.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: probe}}, dry)
		}, true},
		{"the joiner creates a namespace outside the members' prefix", func() error {
			return joiner.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: probe + "-2"}}, dry)
		}, true},
		{"the joiner creates a ServiceAccount in kube-system", func() error {
			return joiner.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: probe + "-2"}}, dry)
		}, true},
		{"the joiner creates a RoleBinding in kube-system", func() error {
			return joiner.Create(ctx, binding(metav1.NamespaceSystem, "mcs-broker-writer", group("system:serviceaccounts:"+nsA)), dry)
		}, true},
		{"the joiner deletes a Secret in kube-system", func() error {
			return joiner.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: probe}}, dry)
		}, true},
		{"the joiner reads a Secret in kube-system", func() error {
			return joiner.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: probe}, &corev1.Secret{})
		}, true},
		{"the joiner reads a credential's Secret", func() error {
			return joiner.Get(ctx, client.ObjectKey{Namespace: nsA, Name: a.name}, &corev1.Secret{})
		}, true},
		{"the joiner creates a ClusterRoleBinding", func() error {
			return joiner.Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: probe},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "mcs-broker-reader"},
				Subjects:   []rbacv1.Subject{group("system:serviceaccounts:" + nsA)},
			}, dry)
		}, true},
		// The one ClusterRoleBinding the joiner may change: the members' read of the records, with members alone.
		{"the joiner adds every ServiceAccount to the records' readers", func() error {
			return updateReaders(ctx, joiner, group("system:serviceaccounts"), dry)
		}, true},
		{"the joiner adds a kube-system ServiceAccount to the records' readers", func() error {
			return updateReaders(ctx, joiner, serviceAccount(metav1.NamespaceSystem, probe), dry)
		}, true},
		{"the joiner adds a member's ServiceAccounts to the records' readers", func() error {
			return updateReaders(ctx, joiner, group("system:serviceaccounts:"+nsA), dry)
		}, false},
		{"the joiner deletes the records' readers", func() error {
			return joiner.Delete(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "mcs-broker-records-readers"}}, dry)
		}, true},
		{"the joiner grants a's writer role to every ServiceAccount", func() error {
			return joiner.Create(ctx, binding(nsA, "mcs-broker-writer", group("system:serviceaccounts")), dry)
		}, true},
		{"the joiner lets b write a's namespace", func() error {
			return joiner.Create(ctx, binding(nsA, "mcs-broker-writer", group("system:serviceaccounts:"+nsB)), dry)
		}, true},
		{"the joiner grants a reader role to a kube-system ServiceAccount", func() error {
			return joiner.Create(ctx, binding(nsA, "mcs-broker-reader", serviceAccount(metav1.NamespaceSystem, probe)), dry)
		}, true},
		{"the joiner grants another role in a member's namespace", func() error {
			return joiner.Create(ctx, binding(nsA, "mcs-broker-directory", group("system:serviceaccounts:"+nsA)), dry)
		}, true},
		{"the joiner grants the reader role in mcs-broker", func() error {
			return joiner.Create(ctx, binding(broker.DirectoryNamespace, "mcs-broker-reader", group("system:serviceaccounts:"+nsA)), dry)
		}, true},
		{"the joiner asks for a token of a's static ServiceAccount", token(joinerKube, nsA, install.MemberServiceAccount(ids[0]), "", time.Hour), true},
		{"the joiner asks for a token of a's default ServiceAccount", token(joinerKube, nsA, "default", "", time.Hour), true},
		{"the joiner asks for an unbound token of a's credential", token(joinerKube, nsA, a.name, "", time.Hour), true},
		{"the joiner asks for a token of a's credential bound to b's Secret", token(joinerKube, nsA, a.name, b.name, time.Hour), true},
		{"the joiner asks for a token of a's credential for longer than a week", token(joinerKube, nsA, a.name, a.name, week+time.Hour), true},
		{"the joiner creates a ServiceAccount token Secret in a's namespace", func() error {
			return joiner.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "credential-probe", Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
				Type:       corev1.SecretTypeServiceAccountToken,
			}, dry)
		}, true},
		{"the joiner creates a Secret of another name in a's namespace", func() error {
			return joiner.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: probe}}, dry)
		}, true},
		// A member's credential.
		{"a's credential writes a MemberLease in its namespace", func() error {
			return recordsA.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: probe}}, dry)
		}, false},
		{"a's credential writes a Lease of the previous layout in its namespace", func() error {
			return memberA.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: probe}}, dry)
		}, false},
		// Both of this release: neither reads the other in the previous layout.
		{"a's credential reads b's namespace in the previous layout", func() error {
			return memberA.List(ctx, &coordinationv1.LeaseList{}, client.InNamespace(nsB))
		}, true},
		{"a's credential reads the member directory", func() error {
			return memberA.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(broker.DirectoryNamespace))
		}, false},
		{"a's credential renews its token", token(memberKubeA, nsA, a.name, a.name, 10*time.Minute), false},
		{"a's credential asks for an unbound token of itself", token(memberKubeA, nsA, a.name, "", time.Hour), true},
		{"a's credential asks for a token of itself for longer than a week", token(memberKubeA, nsA, a.name, a.name, week+time.Hour), true},
		{"a's credential asks for a token of its namespace's default ServiceAccount", token(memberKubeA, nsA, "default", "", time.Hour), true},
		{"a's credential asks for a token of its static ServiceAccount", token(memberKubeA, nsA, install.MemberServiceAccount(ids[0]), "", time.Hour), true},
		{"a's credential asks for a token of b's", token(memberKubeA, nsB, b.name, b.name, time.Hour), true},
		{"a's credential creates a ServiceAccount", func() error {
			return memberA.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "credential-probe"}}, dry)
		}, true},
		{"a's credential writes a Lease in b's namespace", func() error {
			return memberA.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: probe}}, dry)
		}, true},
		{"a's credential writes a MemberLease in b's namespace", func() error {
			return recordsA.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: probe}}, dry)
		}, true},
	}
	for _, c := range checks {
		err := c.do()
		switch {
		case c.forbidden && !apierrors.IsForbidden(err):
			t.Errorf("%s: want Forbidden, got %v", c.what, err)
		case !c.forbidden && err != nil:
			t.Errorf("%s: want success, got %v", c.what, err)
		}
	}

	// A token a's credential asked for itself, as a thief of its token would: evict revokes it too.
	stolen, err := memberKubeA.CoreV1().ServiceAccounts(nsA).CreateToken(ctx, a.name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(week / time.Second)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: a.name},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	evicted := time.Now()
	if err := install.Evict(ctx, info, ids[0], time.Minute, io.Discard); err != nil {
		t.Fatalf("evicting %s with the joiner's token: %v", ids[0], err)
	}
	t.Logf("evicted %s in %v", ids[0], time.Since(evicted).Round(time.Millisecond))
	for what, tok := range map[string]string{"a's token": a.config.BearerToken, "the token a's credential asked for": stolen.Status.Token} {
		poll.T(t, 30*time.Second, what+" refused after evict", func() error { return wantUnauthorized(ctx, cs.Broker.Config, tok) })
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsA}},
		broker.DirectoryEntry(ids[0]),
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: broker.DirectoryNamespace, Name: "mcs-directory-" + ids[0]}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: "mcs-reader-" + ids[0]}},
	} {
		if err := admin.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s after evict: %v, want NotFound", o, client.ObjectKeyFromObject(o), err)
		}
	}
	if err := newClient(t, b.config).List(ctx, &coordinationv1.LeaseList{}, client.InNamespace(nsB)); err != nil {
		t.Errorf("b's credential after a's eviction: %v", err)
	}

	// A new joiner token that revokes the old ones: the old broker-info no longer works, the new one does.
	renewed, err := install.BrokerInit(ctx, cs.Broker.Config, install.InitOptions{ClusterSet: "clusterset", TokenExpiration: time.Hour, RotateJoiner: true}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	poll.T(t, 30*time.Second, "the old joiner token refused after init --rotate-joiner", func() error {
		return wantUnauthorized(ctx, cs.Broker.Config, info.Token)
	})
	if err := install.BrokerIdentity(ctx, renewed, ids[1]); err != nil {
		t.Errorf("joining again with the new joiner token: %v", err)
	}

	// b's cluster gone: unjoin takes it out from the broker alone. Joined again, b is what uninstall finds.
	unjoinGone(t, cs, renewed, ids[1], b)
	if err := install.BrokerIdentity(ctx, renewed, ids[1]); err != nil {
		t.Fatalf("joining %s again after unjoin --broker-only: %v", ids[1], err)
	}
	uninstallBroker(t, cs, renewed, ids[1])
}

// credential is a member's broker credential: its client configuration and its name.
type credential struct {
	config *rest.Config
	name   string
}

func newCredential(t *testing.T, kubeconfig []byte, name string) credential {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return credential{config: cfg, name: name}
}

func newClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: clusterset.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newKube(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// wantUnauthorized returns nil once the API server of admin refuses token as unauthenticated.
func wantUnauthorized(ctx context.Context, admin *rest.Config, token string) error {
	hc, err := rest.HTTPClientFor(&rest.Config{Host: admin.Host, TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData}})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin.Host+"/api", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		return fmt.Errorf("the broker answers %s", resp.Status)
	}
	return nil
}

// updateReaders updates the ClusterRoleBinding mcs-broker-records-readers with subject added, as c.
func updateReaders(ctx context.Context, c client.Client, subject rbacv1.Subject, opts ...client.UpdateOption) error {
	crb := &rbacv1.ClusterRoleBinding{}
	if err := c.Get(ctx, client.ObjectKey{Name: "mcs-broker-records-readers"}, crb); err != nil {
		return err
	}
	crb.Subjects = append(crb.Subjects, subject)
	return c.Update(ctx, crb, opts...)
}
