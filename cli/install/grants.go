package install

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	brokerv1alpha1 "vksfleet.dev/fleet/api/broker/v1alpha1"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/mcs/names"
)

// The roles build/deploy/broker defines, and the prefixes of the RoleBindings that grant them to one member.
const (
	readerRole             = "mcs-broker-reader"
	writerRole             = "mcs-broker-writer"
	directoryRole          = "mcs-broker-directory"
	recordsReaderRole      = "mcs-broker-records-reader"
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
		Subjects:   []rbacv1.Subject{memberSubject(id)},
	}
}

// serviceAccountGroup is the group the API server puts every ServiceAccount of namespace in.
func serviceAccountGroup(namespace string) string { return "system:serviceaccounts:" + namespace }

// recordReaders is the ClusterRoleBinding that lets members read the broker's records cluster-wide
// (build/deploy/broker/rbac.yaml): one subject per member.
const recordReaders = "mcs-broker-records-readers"

// GrantReads lets the member id read the broker's records (a subject of recordReaders), read and be read in the
// previous release's layout by the members of that release the directory lists (pairwise RoleBindings, as that
// release granted every pair; none between two members of this one), and then lists id in the directory, as join
// does after it applied the member's identity (build/deploy/member) with client b, the joiner's or an
// administrator's. The entry is marked as this release's (broker.MarkedEntry) when the member is new or was
// marked; a member of the previous release joined again is marked by MarkPublished, once its controller of this
// release has published its records. Two members that join at once each list the directory again after adding
// themselves: the later of the two additions comes before the other's second list, so one of them grants the
// pair. It returns the number of other members.
func GrantReads(ctx context.Context, b client.Client, id string) (others int, err error) {
	if err := addRecordReader(ctx, b, id); err != nil {
		return 0, err
	}
	marked, err := entryMarked(ctx, b, id)
	if err != nil {
		return 0, err
	}
	granted := map[string]bool{}
	grantAll := func() error {
		members, err := directory(ctx, b)
		if err != nil {
			return err
		}
		others = 0
		for _, m := range members {
			if m.ClusterID == id {
				continue
			}
			others++
			if granted[m.ClusterID] || (marked && m.Records) {
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
	entry := broker.DirectoryEntry(id)
	if marked {
		entry = broker.MarkedEntry(id)
	}
	for _, o := range []client.Object{directoryBinding(id), entry} {
		if err := applyTyped(ctx, b, o, fieldOwner); err != nil {
			return 0, err
		}
	}
	if err := grantAll(); err != nil {
		return 0, err
	}
	return others, nil
}

// entryMarked says whether the member id is new to the directory or marked there as this release's.
func entryMarked(ctx context.Context, b client.Reader, id string) (bool, error) {
	e := &corev1.ConfigMap{}
	if err := b.Get(ctx, client.ObjectKeyFromObject(broker.DirectoryEntry(id)), e); apierrors.IsNotFound(err) {
		return true, nil
	} else if err != nil {
		return false, fmt.Errorf("reading the member directory entry of %s: %w", id, err)
	}
	return broker.Marked(e), nil
}

// MarkPublished marks the member id's directory entry as this release's once its MemberLease says its controller
// has published every export it started with (names.AnnotationRecordsPublished), waiting up to wait: from then on
// the other members read its records, and no longer its objects of the previous layout. It says what it did.
func MarkPublished(ctx context.Context, b client.Client, id string, wait time.Duration) (string, error) {
	if marked, err := entryMarked(ctx, b, id); err != nil || marked {
		return "marked as this release's: the other members read its records", err
	}
	err := waitFor(ctx, wait, func() error {
		l, err := memberLease(ctx, b, id)
		if err != nil {
			return err
		}
		if l.GetAnnotations()[names.AnnotationRecordsPublished] != "true" {
			return fmt.Errorf("the controller has not published all its exports as records yet (MemberLease %s/%s): see `kubectl -n %s logs deploy/%s`",
				l.GetNamespace(), l.GetName(), controllerNamespace, controllerDeployment)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("%w; the member stays read in the previous release's layout until `kubectl mcs join` runs again", err)
	}
	if err := applyTyped(ctx, b, broker.MarkedEntry(id), fieldOwner); err != nil {
		return "", err
	}
	return "marked as this release's once its records were published: the other members read them from now on", nil
}

// memberLease reads the member id's MemberLease on the broker, as unstructured: the broker's record kinds name
// Go types of other groups, which the CLI's scheme keeps for those.
func memberLease(ctx context.Context, b client.Reader, id string) (*unstructured.Unstructured, error) {
	l := &unstructured.Unstructured{}
	l.SetGroupVersionKind(brokerv1alpha1.SchemeGroupVersion.WithKind(brokerv1alpha1.MemberLease))
	err := b.Get(ctx, client.ObjectKey{Namespace: names.BrokerNamespace(id), Name: names.LeaseName}, l)
	return l, err
}

// addRecordReader adds the member id's ServiceAccounts to the subjects of recordReaders, which broker init made:
// an update of the binding as read, retried when another join changed it in between, so that none is lost.
func addRecordReader(ctx context.Context, b client.Client, id string) error {
	subject := memberSubject(id)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crb := &rbacv1.ClusterRoleBinding{}
		if err := b.Get(ctx, client.ObjectKey{Name: recordReaders}, crb); apierrors.IsNotFound(err) {
			return fmt.Errorf("the broker has no ClusterRoleBinding %s: run this release's `kubectl mcs broker init` on it first", recordReaders)
		} else if err != nil {
			return fmt.Errorf("reading ClusterRoleBinding %s: %w", recordReaders, err)
		}
		if slices.Contains(crb.Subjects, subject) {
			return nil
		}
		crb.Subjects = append(crb.Subjects, subject)
		return b.Update(ctx, crb)
	})
}

// removeRecordReader takes the member id out of recordReaders' subjects; a binding already without it, or gone,
// is no error.
func removeRecordReader(ctx context.Context, b client.Client, id string) error {
	subject := memberSubject(id)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crb := &rbacv1.ClusterRoleBinding{}
		if err := b.Get(ctx, client.ObjectKey{Name: recordReaders}, crb); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return fmt.Errorf("reading ClusterRoleBinding %s: %w", recordReaders, err)
		}
		kept := slices.DeleteFunc(slices.Clone(crb.Subjects), func(s rbacv1.Subject) bool { return s == subject })
		if len(kept) == len(crb.Subjects) {
			return nil
		}
		crb.Subjects = kept
		return b.Update(ctx, crb)
	})
}

// memberSubject is the subject that stands for the member id's ServiceAccounts in a binding.
func memberSubject(id string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: serviceAccountGroup(names.BrokerNamespace(id))}
}

// revokeReads takes the member id out of the directory and takes away its read access to the records and to the
// other members' namespaces (its own namespace goes with the bindings that let others read it).
func revokeReads(ctx context.Context, b client.Client, id string) error {
	members, err := directory(ctx, b)
	if err != nil {
		return err
	}
	if err := removeRecordReader(ctx, b, id); err != nil {
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
