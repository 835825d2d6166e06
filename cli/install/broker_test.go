package install

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"vksfleet.dev/fleet/build/deploy"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/export"
	"vksfleet.dev/fleet/mcs/names"
)

func TestCheckLifetime(t *testing.T) {
	for _, tc := range []struct {
		d  time.Duration
		ok bool
	}{
		{9 * time.Minute, false},
		{10 * time.Minute, true},
		{24 * time.Hour, true},
		{7 * 24 * time.Hour, true},
		{7*24*time.Hour + time.Second, false},
		{30 * 24 * time.Hour, false},
	} {
		if err := checkLifetime(tc.d); (err == nil) != tc.ok {
			t.Errorf("checkLifetime(%v) = %v, want ok %v", tc.d, err, tc.ok)
		}
	}
}

// renderBroker decodes build/deploy/broker into typed objects of the kinds the tests look at.
func renderBroker(t *testing.T) (roles map[string]rbacv1.ClusterRole, policies map[string]admissionregistrationv1.ValidatingAdmissionPolicy, bindings map[string]admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	manifests, err := deploy.Render("broker")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decode(manifests)
	if err != nil {
		t.Fatal(err)
	}
	roles = map[string]rbacv1.ClusterRole{}
	policies = map[string]admissionregistrationv1.ValidatingAdmissionPolicy{}
	bindings = map[string]admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	convert := func(o *unstructured.Unstructured, into any) {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			convert(o, &r)
			roles[o.GetName()] = r
		case "ValidatingAdmissionPolicy":
			var p admissionregistrationv1.ValidatingAdmissionPolicy
			convert(o, &p)
			policies[o.GetName()] = p
		case "ValidatingAdmissionPolicyBinding":
			var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
			convert(o, &b)
			bindings[o.GetName()] = b
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			convert(o, &b)
			switch {
			case b.Name == recordReaders && b.RoleRef.Name == recordsReaderRole && len(b.Subjects) == 0:
				// Join fills its subjects: broker init, applying it again, must leave them alone.
			case b.Name == recordReaders:
				t.Errorf("ClusterRoleBinding %s binds %s to %v; want %s to none, which join adds", b.Name, b.RoleRef.Name, b.Subjects, recordsReaderRole)
			case b.Name != "mcs-broker-joiner":
				t.Errorf("the broker base binds ClusterRoleBinding %s", o.GetName())
			}
		}
	}
	return roles, policies, bindings
}

// TestJoinerRights checks the joiner's RBAC: no ClusterRoleBinding right but reading and updating the records'
// readers, no Secret read, and bind on the members' roles only.
func TestJoinerRights(t *testing.T) {
	roles, _, _ := renderBroker(t)
	joiner, ok := roles["mcs-broker-joiner"]
	if !ok {
		t.Fatal("no ClusterRole mcs-broker-joiner")
	}
	for _, r := range joiner.Rules {
		if slices.Contains(r.Resources, "clusterrolebindings") && (len(r.Resources) > 1 || !slices.Equal(r.ResourceNames, []string{recordReaders}) ||
			!slices.Equal(r.Verbs, []string{"get", "update"})) || slices.Contains(r.Resources, "*") {
			t.Errorf("the joiner may %v %v %v", r.Verbs, r.Resources, r.ResourceNames)
		}
		if slices.Contains(r.Resources, "secrets") && slices.ContainsFunc(r.Verbs, func(v string) bool { return v != "create" && v != "delete" }) {
			t.Errorf("the joiner may %v Secrets", r.Verbs)
		}
		if slices.Contains(r.Verbs, "bind") || slices.Contains(r.Verbs, "escalate") {
			want := []string{readerRole, writerRole, directoryRole, recordsReaderRole}
			if !slices.Equal(r.ResourceNames, want) || !slices.Equal(r.Verbs, []string{"bind"}) {
				t.Errorf("the joiner may %v %v, want bind on %v alone", r.Verbs, r.ResourceNames, want)
			}
		}
	}
}

// TestBrokerPolicies checks that the broker's admission policies are bound, deny, and hold the names and limits
// this package uses: the joiner's user name, the members' namespace prefix, the credential prefix and the longest
// lifetime of a credential's token.
func TestBrokerPolicies(t *testing.T) {
	_, policies, bindings := renderBroker(t)
	limit := "expirationSeconds <= " + strconv.Itoa(int(maxCredentialLifetime/time.Second))
	const prefix = "mcs-member-"
	if !names.IsBrokerNamespace(prefix) || names.IsBrokerNamespace(prefix[:len(prefix)-1]) {
		t.Fatalf("the members' namespaces are not named %s*", prefix)
	}
	for name, want := range map[string][]string{
		"mcs-broker-joiner": {
			"'system:serviceaccount:" + joinerNamespace + ":" + joinerName + "'", "'" + prefix + "'", "'" + credentialPrefix + "'", limit,
			"'" + broker.DirectoryNamespace + "'", "'" + readerRole + "'", "'" + writerRole + "'", "'" + directoryRole + "'",
			"'" + recordReaders + "'", "'" + recordsReaderRole + "'",
			"'system:serviceaccounts:" + prefix + "'",
		},
		"mcs-broker-member-tokens": {"'system:serviceaccount:" + prefix + "'", "'" + credentialPrefix + "'", limit},
		"mcs-broker-member-slices": {"'system:serviceaccount:" + prefix + "'", "size(object.endpoints) <= " + strconv.Itoa(export.MaxEndpointsPerSlice)},
	} {
		p, ok := policies[name]
		if !ok {
			t.Errorf("no ValidatingAdmissionPolicy %s", name)
			continue
		}
		var text strings.Builder
		for _, c := range p.Spec.MatchConditions {
			text.WriteString(c.Expression + "\n")
		}
		for _, v := range p.Spec.Variables {
			text.WriteString(v.Expression + "\n")
		}
		for _, v := range p.Spec.Validations {
			text.WriteString(v.Expression + "\n")
			if v.Reason == nil || *v.Reason != "Forbidden" {
				t.Errorf("%s: validation %q answers %v, want Forbidden", name, v.Expression, v.Reason)
			}
		}
		for _, w := range want {
			if !strings.Contains(text.String(), w) {
				t.Errorf("%s does not hold %s", name, w)
			}
		}
		if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("%s: failurePolicy %v, want Fail", name, p.Spec.FailurePolicy)
		}
		b, ok := bindings[name]
		if !ok || b.Spec.PolicyName != name || !slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
			t.Errorf("%s: binding %+v, want one that denies", name, b.Spec)
		}
	}
}

// TestMemberBindings checks that a member's roles go to the group of its namespace's ServiceAccounts, which
// holds every credential of it, in the namespaces where the broker's policy lets the joiner grant them.
func TestMemberBindings(t *testing.T) {
	a, b := names.BrokerNamespace("a"), names.BrokerNamespace("b")
	for _, tc := range []struct {
		rb                  *rbacv1.RoleBinding
		namespace, role, by string
	}{
		{writerBinding("a"), a, writerRole, a},
		{readerBinding("a", "b"), b, readerRole, a},
		{directoryBinding("a"), broker.DirectoryNamespace, directoryRole, a},
	} {
		want := []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + tc.by}}
		if tc.rb.Namespace != tc.namespace || tc.rb.RoleRef.Name != tc.role || tc.rb.RoleRef.Kind != "ClusterRole" || !slices.Equal(tc.rb.Subjects, want) {
			t.Errorf("RoleBinding %s/%s grants %s %s to %+v, want %s in %s to %+v", tc.rb.Namespace, tc.rb.Name, tc.rb.RoleRef.Kind, tc.rb.RoleRef.Name,
				tc.rb.Subjects, tc.role, tc.namespace, want)
		}
	}
}

func TestIsLegacyReaderBinding(t *testing.T) {
	crb := func(name, role string) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: role}}
	}
	for _, tc := range []struct {
		crb  *rbacv1.ClusterRoleBinding
		want bool
	}{
		{crb("mcs-broker-reader-cluster-a", readerRole), true},
		{crb("mcs-broker-joiner", "mcs-broker-joiner"), false},
		{crb("mcs-broker-reader-cluster-a", "cluster-admin"), false},
		{crb("someone-elses", readerRole), false},
	} {
		if got := isLegacyReaderBinding(tc.crb); got != tc.want {
			t.Errorf("isLegacyReaderBinding(%s to %s) = %v, want %v", tc.crb.Name, tc.crb.RoleRef.Name, got, tc.want)
		}
	}
}
