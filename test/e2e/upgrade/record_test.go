package upgrade

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	"sigs.k8s.io/yaml"

	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/framework"
)

// recordBroker writes what members wrote on the broker into dir: the export records (records.yaml), the
// endpoint slices (slices.yaml), the members' Leases (leases.yaml) and the member directory (directory.yaml),
// each a YAML stream sorted by namespace and name.
func recordBroker(ctx context.Context, c client.Client, dir string, rel *framework.Release) error {
	var records mcsv1beta1.ServiceImportList
	var eps discoveryv1.EndpointSliceList
	var leases coordinationv1.LeaseList
	var entries corev1.ConfigMapList
	lists := []struct {
		file string
		list client.ObjectList
		gvk  metav1.TypeMeta
		opts []client.ListOption
	}{
		{"records.yaml", &records, metav1.TypeMeta{APIVersion: "multicluster.x-k8s.io/v1beta1", Kind: "ServiceImport"},
			[]client.ListOption{client.MatchingLabelsSelector{Selector: broker.Selector}}},
		{"slices.yaml", &eps, metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
			[]client.ListOption{client.MatchingLabelsSelector{Selector: broker.Selector}}},
		{"leases.yaml", &leases, metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"}, nil},
		{"directory.yaml", &entries, metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			[]client.ListOption{client.InNamespace(broker.DirectoryNamespace), client.MatchingLabelsSelector{Selector: broker.DirectorySelector}}},
	}
	for _, l := range lists {
		if err := c.List(ctx, l.list, l.opts...); err != nil {
			return err
		}
		var objs []client.Object
		switch list := l.list.(type) {
		case *mcsv1beta1.ServiceImportList:
			for i := range list.Items {
				objs = append(objs, &list.Items[i])
			}
		case *discoveryv1.EndpointSliceList:
			for i := range list.Items {
				objs = append(objs, &list.Items[i])
			}
		case *coordinationv1.LeaseList:
			for i := range list.Items {
				// Only the members' Leases: the broker's own API servers hold Leases too.
				if names.IsBrokerNamespace(list.Items[i].Namespace) && list.Items[i].Name == names.LeaseName {
					objs = append(objs, &list.Items[i])
				}
			}
		case *corev1.ConfigMapList:
			for i := range list.Items {
				objs = append(objs, &list.Items[i])
			}
		}
		slices.SortFunc(objs, func(a, b client.Object) int {
			return strings.Compare(a.GetNamespace()+"/"+a.GetName(), b.GetNamespace()+"/"+b.GetName())
		})
		var b strings.Builder
		fmt.Fprintf(&b, "# The broker's objects as the release %s (commit %s) wrote them, recorded on %s by\n"+
			"#   UPGRADE_RECORD=$PWD/controller/broker/testdata/previous go test -run TestRollingUpgrade ./test/e2e/upgrade\n"+
			"# from a clusterset of 2 members on that release, once settled, before the upgrade. Read by\n"+
			"# controller/broker's record-format test. Left out: uid, resourceVersion, generation, managedFields.\n",
			rel.Tag, rel.Commit, time.Now().UTC().Format(time.DateOnly))
		for _, o := range objs {
			o.SetUID("")
			o.SetResourceVersion("")
			o.SetGeneration(0)
			o.SetManagedFields(nil)
			o.GetObjectKind().SetGroupVersionKind(l.gvk.GroupVersionKind())
			y, err := yaml.Marshal(o)
			if err != nil {
				return err
			}
			b.WriteString("---\n")
			b.Write(y)
		}
		if err := os.WriteFile(filepath.Join(dir, l.file), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}
