package install

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/mcs/names"
)

// UninstallOptions say how to take the clusterset off its broker.
type UninstallOptions struct {
	// Force evicts the members still joined, as Evict does, where uninstall would refuse.
	Force bool
	// DeleteCRDs deletes the mcs-api CRDs too, which deletes every object of their kinds on the broker's cluster.
	DeleteCRDs bool
	// Wait bounds each wait: a namespace or a CRD to go.
	Wait time.Duration
}

// BrokerUninstall takes the clusterset off the API server cfg reaches, with an administrator's rights there: it
// refuses while members are joined (it lists them) unless opts.Force, which evicts each first; then it deletes what
// BrokerInit applied (the joiner first, which revokes every broker-info's token, the admission policies, the roles
// and bindings, and the namespace mcs-broker with the member directory), and the CRDs only with opts.DeleteCRDs and
// once no object of theirs is left but the members'. What is already gone is skipped, so running it again changes
// nothing. It prints what it deleted, and what it leaves.
func BrokerUninstall(ctx context.Context, cfg *rest.Config, opts UninstallOptions, out io.Writer) error {
	c, err := newClient(cfg, "broker")
	if err != nil {
		return err
	}
	return brokerUninstall(ctx, steps{out}, c, opts)
}

// brokerUninstall is BrokerUninstall with the broker's client c.
func brokerUninstall(ctx context.Context, s steps, c client.Client, opts UninstallOptions) error {
	objs, err := brokerObjects()
	if err != nil {
		return err
	}
	var joined members
	err = s.do("members", func() (string, error) {
		if joined, err = joinedMembers(ctx, c); err != nil {
			return "", err
		}
		switch {
		case joined.count() == 0:
			return "none joined", nil
		case !opts.Force:
			return "", fmt.Errorf("members still joined: %s; unjoin each (`kubectl mcs unjoin --broker-only --cluster-id ID` for one that is gone), or give --force to evict them all", joined)
		}
		return fmt.Sprintf("evicting %s (--force)", joined), nil
	})
	if err != nil {
		return err
	}
	// Before any eviction, so that a refusal changes nothing.
	if opts.DeleteCRDs {
		err = s.do("CRDs hold nothing but the members'", func() (string, error) {
			others, err := othersObjects(ctx, c, objs)
			if err != nil {
				return "", err
			}
			if others != "" {
				return "", fmt.Errorf("outside the members' broker namespaces the CRDs hold %s, which deleting them would delete: this cluster is a member too, or runs another MCS implementation; delete those first, or uninstall without --delete-crds", others)
			}
			return "none other", nil
		})
		if err != nil {
			return err
		}
	}
	for _, id := range joined.ids {
		if err := evict(ctx, s, c, id, opts.Wait); err != nil {
			return fmt.Errorf("evicting %s: %w", id, err)
		}
	}
	for _, ns := range joined.unlisted {
		if err := evictNamespace(ctx, s, c, ns, "", opts.Wait); err != nil {
			return fmt.Errorf("evicting the member of %s: %w", ns, err)
		}
	}
	err = s.do("cluster-wide grants of earlier releases", func() (string, error) {
		n, err := deleteLegacyReaderBindings(ctx, c)
		return fmt.Sprintf("%d ClusterRoleBindings of %s deleted", n, readerRole), err
	})
	if err != nil {
		return err
	}
	err = s.do("what broker init applied", func() (string, error) {
		deleted, err := deleteObjects(ctx, c, uninstallOrder(objs, opts.DeleteCRDs), opts.Wait)
		if err != nil {
			return "", err
		}
		if len(deleted) == 0 {
			return "nothing left to delete", nil
		}
		return fmt.Sprintf("deleted %d:\n      %s", len(deleted), strings.Join(deleted, "\n      ")), nil
	})
	if err != nil {
		return err
	}
	if !opts.DeleteCRDs {
		var crds []string
		for _, o := range objs {
			if o.GetKind() == crdKind {
				crds = append(crds, o.GetName())
			}
		}
		fmt.Fprintf(s.out, "left  the CRDs %s: the objects of their kinds outside the members' namespaces are this cluster's own, or another MCS implementation's; --delete-crds deletes the CRDs once there is none\n", strings.Join(crds, ", "))
	}
	fmt.Fprintf(s.out, "left  every broker-info file: its joiner token is revoked, and nothing on the broker accepts it; delete them\n")
	return nil
}

// crdKind is the kind of a CustomResourceDefinition.
const crdKind = "CustomResourceDefinition"

// members are the members joined to a broker: those its directory lists, by cluster id, and the broker namespaces
// no entry names (a member given its identity from build/deploy/member, without join, or one removed half way).
type members struct {
	ids      []string
	unlisted []string
}

// count is the number of members.
func (m members) count() int { return len(m.ids) + len(m.unlisted) }

// String lists the members for an operator: ids, then namespaces.
func (m members) String() string {
	list := slices.Clone(m.ids)
	for _, ns := range m.unlisted {
		list = append(list, "broker namespace "+ns+" (no directory entry)")
	}
	return strings.Join(list, ", ")
}

// joinedMembers reads the members of the broker: the directory's, and the broker namespaces it does not name.
func joinedMembers(ctx context.Context, c client.Client) (members, error) {
	var m members
	listed, err := directory(ctx, c)
	if err != nil {
		return m, err
	}
	known := map[string]bool{}
	for _, l := range listed {
		m.ids = append(m.ids, l.ClusterID)
		known[l.Namespace] = true
	}
	var namespaces corev1.NamespaceList
	if err := c.List(ctx, &namespaces); err != nil {
		return m, fmt.Errorf("listing namespaces: %w", err)
	}
	for _, ns := range namespaces.Items {
		if names.IsBrokerNamespace(ns.Name) && !known[ns.Name] {
			m.unlisted = append(m.unlisted, ns.Name)
		}
	}
	slices.Sort(m.unlisted)
	return m, nil
}

// othersObjects describes the objects of the CRDs among objs that are outside the members' broker namespaces
// ("2 ClusterProperty, 1 ServiceExport"), "" when there is none.
func othersObjects(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) (string, error) {
	counts := map[string]int{}
	for _, o := range objs {
		if o.GetKind() != crdKind {
			continue
		}
		items, err := listServed(ctx, c, o.GetName())
		if err != nil {
			return "", fmt.Errorf("listing the objects of CRD %s: %w", o.GetName(), err)
		}
		for _, i := range items {
			if !names.IsBrokerNamespace(i.GetNamespace()) {
				counts[i.GetKind()]++
			}
		}
	}
	var parts []string
	for _, kind := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%d %s", counts[kind], kind))
	}
	return strings.Join(parts, ", "), nil
}

// uninstallOrder is the order uninstall deletes what init applied, objs in init's order: the ServiceAccounts
// first, the joiner's, which revokes every joiner token while the admission policies still confine them; then the
// rest in the reverse of init's order, so that bindings go before what they bind and the namespace last; the
// CRDs only with crds, as deleting one deletes every object of its kind.
func uninstallOrder(objs []*unstructured.Unstructured, crds bool) []*unstructured.Unstructured {
	var first, rest []*unstructured.Unstructured
	for _, o := range slices.Backward(objs) {
		switch o.GetKind() {
		case "ServiceAccount":
			first = append(first, o)
		case crdKind:
			if crds {
				rest = append(rest, o)
			}
		default:
			rest = append(rest, o)
		}
	}
	return append(first, rest...)
}
