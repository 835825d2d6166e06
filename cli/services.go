package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/locality"
	"vksfleet.dev/fleet/mcs/names"
)

// ServiceRow is one cell of the services × clusters matrix: what one member holds of one service.
type ServiceRow struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Cluster is the member's context, or its cluster id when no context reaches it.
	Cluster string `json:"cluster"`
	// Exported and Imported say whether the member has a ServiceExport and a ServiceImport of the service.
	Exported bool `json:"exported"`
	Imported bool `json:"imported"`
	// Type is the import's type, else the exported Service's as it would export.
	Type string `json:"type,omitempty"`
	// ClusterSetIPs are the import's IPs in this member.
	ClusterSetIPs []string `json:"clusterSetIPs,omitempty"`
	Ports         []string `json:"ports,omitempty"`
	// Endpoints are the imported endpoints per source cluster.
	Endpoints []SourceEndpoints `json:"endpoints,omitempty"`
	// Valid, Ready and Conflicts come from the member's ServiceExport conditions; Conflicts holds the Conflict
	// reasons when it is True.
	Valid     string   `json:"valid,omitempty"`
	Ready     string   `json:"ready,omitempty"`
	Conflicts []string `json:"conflicts,omitempty"`
	// Locality is the locality tier the member's import uses (localityText).
	Locality string `json:"locality"`
	// Note says why the cell is empty: the member is unreachable, no context reaches it, or it lacks the namespace.
	Note string `json:"note,omitempty"`
}

// noLocality fills the locality column where the member ranks no endpoints: every one is used alike.
const noLocality = "-"

// Matrix is the services × clusters matrix, for every service exported or imported anywhere (filtered by ns and
// name when set), sorted by namespace, name and cluster, so that scripts can rely on its order.
func Matrix(s *Snapshot, ns, name string) []ServiceRow {
	var rows []ServiceRow
	for _, svc := range s.services(ns, name) {
		for i := range s.Members {
			rows = append(rows, matrixRow(&s.Members[i], svc))
		}
	}
	return rows
}

func matrixRow(m *Member, svc types.NamespacedName) ServiceRow {
	row := ServiceRow{Namespace: svc.Namespace, Name: svc.Name, Cluster: m.name(), Locality: noLocality}
	switch {
	case m.Context == "":
		row.Note = "no context"
		return row
	case !m.reachable():
		row.Note = "unreachable"
		return row
	case !m.hasNamespace(svc.Namespace):
		row.Note = "no namespace"
		return row
	}
	if se := m.export(svc); se != nil {
		row.Exported = true
		row.Valid = conditionText(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionValid))
		row.Ready = conditionText(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionReady))
		if c := meta.FindStatusCondition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionConflict)); c != nil && c.Status == metav1.ConditionTrue {
			row.Conflicts = strings.Split(c.Reason, ",")
		}
	}
	if si := m.serviceImport(svc); si != nil {
		row.Imported = true
		row.Type = string(si.Spec.Type)
		row.ClusterSetIPs = si.Spec.IPs
		for _, p := range si.Spec.Ports {
			row.Ports = append(row.Ports, portText(p))
		}
		row.Endpoints = endpointCounts(m.importedSlices(svc))
		row.Locality = localityText(si)
	}
	return row
}

// localityText is the locality cell of an import, from the tiers its controller records on it
// (names.AnnotationLocality, see package locality): a headless import's DNS tier; a ClusterSetIP import's zone
// tier, or zone=tier for each zone, sorted, when its zones use different tiers. It is noLocality while the
// controller records none, and "invalid" when the annotation does not decode.
func localityText(si *mcsv1beta1.ServiceImport) string {
	v, ok := si.Annotations[names.AnnotationLocality]
	if !ok {
		return noLocality
	}
	a, err := locality.Decode(v)
	if err != nil {
		return "invalid"
	}
	if si.Spec.Type == mcsv1beta1.Headless {
		return dash(a.DNSTier)
	}
	zones := slices.Sorted(maps.Keys(a.Zones))
	tiers := make([]string, len(zones))
	for i, z := range zones {
		tiers[i] = a.Zones[z]
	}
	if len(slices.Compact(slices.Clone(tiers))) == 1 {
		return tiers[0]
	}
	for i, z := range zones {
		tiers[i] = z + "=" + tiers[i]
	}
	return dash(strings.Join(tiers, " "))
}

// conditionText is "True", or "False/Reason", or "" when the condition is absent.
func conditionText(conds []metav1.Condition, t string) string {
	c := meta.FindStatusCondition(conds, t)
	switch {
	case c == nil:
		return ""
	case c.Status == metav1.ConditionTrue:
		return string(c.Status)
	default:
		return string(c.Status) + "/" + c.Reason
	}
}

func portText(p mcsv1beta1.ServicePort) string {
	s := fmt.Sprintf("%d/%s", p.Port, p.Protocol)
	if p.Name != "" {
		s = p.Name + ":" + s
	}
	return s
}

// role is the matrix's ROLE cell.
func (r ServiceRow) role() string {
	var parts []string
	if r.Exported {
		parts = append(parts, "exported")
	}
	if r.Imported {
		parts = append(parts, "imported")
	}
	if r.Note != "" {
		parts = append(parts, "("+r.Note+")")
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}

// endpointsText is "cluster-a=2/2 cluster-b=1/1": ready/serving per source cluster.
func (r ServiceRow) endpointsText() string {
	parts := make([]string, 0, len(r.Endpoints))
	for _, e := range r.Endpoints {
		parts = append(parts, fmt.Sprintf("%s=%d/%d", e.Cluster, e.Ready, e.Serving))
	}
	return dash(strings.Join(parts, " "))
}

// servicesTable is the matrix as a kubectl table; wide columns have priority 1.
func servicesTable(rows []ServiceRow) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Namespace", Type: "string"}, {Name: "Name", Type: "string"}, {Name: "Cluster", Type: "string"},
		{Name: "Role", Type: "string"}, {Name: "Type", Type: "string"}, {Name: "ClusterSet-IP", Type: "string"},
		{Name: "Endpoints", Type: "string", Description: "ready/serving endpoints per source cluster"},
		{Name: "Conflict", Type: "string"}, {Name: "Locality", Type: "string"},
		{Name: "Ports", Type: "string", Priority: 1}, {Name: "Valid", Type: "string", Priority: 1},
		{Name: "Ready", Type: "string", Priority: 1},
	}}
	for _, r := range rows {
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{
			r.Namespace, r.Name, r.Cluster, r.role(), dash(r.Type), dash(strings.Join(r.ClusterSetIPs, ",")),
			r.endpointsText(), dash(strings.Join(r.Conflicts, ",")), r.Locality,
			dash(strings.Join(r.Ports, ",")), dash(r.Valid), dash(r.Ready),
		}})
	}
	return t
}

// dash stands for an empty cell, as kubectl prints <none>-like placeholders.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (o *options) servicesCommand() *cobra.Command {
	return o.readCommand(&cobra.Command{
		Use:   "services [NAME]",
		Short: "The services × clusters matrix: exported or imported, type, ClusterSetIP, endpoints per source, conflicts",
		Args:  cobra.MaximumNArgs(1),
	}, true, func(ctx context.Context, ns string, args []string) (view, error) {
		s, err := o.snapshot(ctx, false, nil)
		if err != nil {
			return view{}, err
		}
		name := ""
		if len(args) == 1 {
			name = args[0]
		}
		rows := Matrix(s, ns, name)
		return view{table: servicesTable(rows), object: map[string]any{"services": rows}}, nil
	})
}
