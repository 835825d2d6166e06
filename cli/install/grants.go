package install

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/mcs/names"
)

// The roles build/deploy/broker defines, and the prefixes of the RoleBindings that grant them to one member.
const (
	readerRole             = "mcs-broker-reader"
	writerRole             = "mcs-broker-writer"
	directoryRole          = "mcs-broker-directory"
	readerBindingPrefix    = "mcs-reader-"
	writerBindingPrefix    = "mcs-writer-"
	directoryBindingPrefix = "mcs-directory-"
)

// writerBinding lets the member id write its own broker namespace.
func writerBinding(id string) *rbacv1.RoleBinding {
	return memberBinding(names.BrokerNamespace(id), writerBindingPrefix+id, writerRole, id)
}

// readerBinding lets the member reader read the broker namespace of the member owner.
func readerBinding(reader, owner string) *rbacv1.RoleBinding {
	return memberBinding(names.BrokerNamespace(owner), readerBindingPrefix+reader, readerRole, reader)
}

// directoryBinding lets the member id read the member directory.
func directoryBinding(id string) *rbacv1.RoleBinding {
	return memberBinding(broker.DirectoryNamespace, directoryBindingPrefix+id, directoryRole, id)
}

// memberBinding grants role in namespace to the ServiceAccounts of the member id's broker namespace, as a group:
// the member's credentials come and go there (rotate), and the broker's policy lets none but a credential's own
// ServiceAccount ask for its tokens, so that the namespace's `default` never acts.
func memberBinding(namespace, name, role, id string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{names.LabelManagedBy: fieldOwner}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: serviceAccountGroup(names.BrokerNamespace(id))}},
	}
}

// serviceAccountGroup is the group the API server puts every ServiceAccount of namespace in.
func serviceAccountGroup(namespace string) string { return "system:serviceaccounts:" + namespace }

// GrantReads lets the member id and every member the directory lists read each other's broker namespace, and then
// lists id in the directory, as join does after it applied the member's identity (build/deploy/member) with
// client b, the joiner's or an administrator's. Two members that join at once each list the directory again after adding themselves:
// the later of the two additions comes before the other's second list, so one of them grants the pair. It returns
// the number of other members.
func GrantReads(ctx context.Context, b client.Client, id string) (int, error) {
	granted := map[string]bool{}
	grantAll := func() error {
		members, err := directory(ctx, b)
		if err != nil {
			return err
		}
		for _, m := range members {
			if m.ClusterID == id || granted[m.ClusterID] {
				continue
			}
			for _, rb := range []*rbacv1.RoleBinding{readerBinding(id, m.ClusterID), readerBinding(m.ClusterID, id)} {
				if err := applyTyped(ctx, b, rb, fieldOwner); apierrors.IsNotFound(err) {
					// A member's namespace is gone while its entry stays (an unjoin that stopped half way):
					// nothing there to read.
					continue
				} else if err != nil {
					return err
				}
			}
			granted[m.ClusterID] = true
		}
		return nil
	}
	if err := grantAll(); err != nil {
		return 0, err
	}
	for _, o := range []client.Object{directoryBinding(id), broker.DirectoryEntry(id)} {
		if err := applyTyped(ctx, b, o, fieldOwner); err != nil {
			return 0, err
		}
	}
	if err := grantAll(); err != nil {
		return 0, err
	}
	return len(granted), nil
}

// revokeReads takes the member id out of the directory and takes away its read access to the other members'
// namespaces (its own namespace goes with the bindings that let others read it).
func revokeReads(ctx context.Context, b client.Client, id string) error {
	members, err := directory(ctx, b)
	if err != nil {
		return err
	}
	objs := []client.Object{broker.DirectoryEntry(id), directoryBinding(id)}
	for _, m := range members {
		if m.ClusterID != id {
			objs = append(objs, readerBinding(id, m.ClusterID))
		}
	}
	for _, o := range objs {
		if err := b.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, objectName(o), err)
		}
	}
	return nil
}

// directory lists the members the directory holds.
func directory(ctx context.Context, b client.Client) ([]broker.Listed, error) {
	var entries corev1.ConfigMapList
	if err := b.List(ctx, &entries, client.InNamespace(broker.DirectoryNamespace), client.MatchingLabelsSelector{Selector: broker.DirectorySelector}); err != nil {
		return nil, fmt.Errorf("reading the member directory (has `kubectl mcs broker init` run with this release?): %w", err)
	}
	members, _ := broker.ReadDirectory(entries.Items)
	return members, nil
}

// applyTyped applies one typed object server-side as the field manager owner, as apply does rendered ones.
func applyTyped(ctx context.Context, c client.Client, o client.Object, owner string) error {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return err
	}
	return applyOne(ctx, c, &unstructured.Unstructured{Object: u}, owner)
}
