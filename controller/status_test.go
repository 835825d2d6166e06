package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/controller/export"
	"vksfleet.dev/fleet/controller/imports"
	"vksfleet.dev/fleet/controller/merge"
)

func TestExportStatus(t *testing.T) {
	se := &mcsv1beta1.ServiceExport{ObjectMeta: objMeta("ns", "web")}
	se.Generation = 2
	valid, _ := export.Valid(se, &corev1.Service{}, nil)
	invalid, _ := export.Valid(se, nil, nil)
	cond := func(typ mcsv1beta1.ServiceExportConditionType, status metav1.ConditionStatus, reason mcsv1beta1.ServiceExportConditionReason) metav1.Condition {
		return metav1.Condition{Type: string(typ), Status: status, Reason: string(reason), ObservedGeneration: 2, LastTransitionTime: metav1.Now()}
	}
	published := []metav1.Condition{
		cond(mcsv1beta1.ServiceExportConditionValid, metav1.ConditionTrue, mcsv1beta1.ServiceExportReasonValid),
		cond(mcsv1beta1.ServiceExportConditionReady, metav1.ConditionTrue, mcsv1beta1.ServiceExportReasonExported),
		cond(mcsv1beta1.ServiceExportConditionConflict, metav1.ConditionFalse, mcsv1beta1.ServiceExportReasonNoConflicts),
	}
	portConflict := merge.Result{Conflicts: []merge.Conflict{{Reason: mcsv1beta1.ServiceExportReasonPortConflict, Message: "Conflicting ports."}}}
	cases := []struct {
		name       string
		before     []metav1.Condition
		valid      metav1.Condition
		exported   bool
		publishErr error
		merged     merge.Result
		want       []string // Type=Status/Reason, by type
		readyMsg   string   // in Ready's message
	}{
		{"valid and published", nil, valid, true, nil, merge.Result{},
			[]string{"Conflict=False/NoConflicts", "Ready=True/Exported", "Valid=True/Valid"}, "exported"},
		{"a conflict", published, valid, true, nil, portConflict,
			[]string{"Conflict=True/PortConflict", "Ready=True/Exported", "Valid=True/Valid"}, "exported"},
		{"invalid: Conflict removed", published, invalid, false, nil, merge.Result{},
			[]string{"Ready=False/Pending", "Valid=False/NoService"}, "not valid"},
		{"publish failed", published, valid, true, errors.New("broker down"), merge.Result{},
			[]string{"Conflict=False/NoConflicts", "Ready=False/Failed", "Valid=True/Valid"}, "broker down"},
	}
	for _, c := range cases {
		ctx := context.Background()
		stored := se.DeepCopy()
		stored.Status.Conditions = c.before
		local := newFakeCluster(t, stored)
		r := testReconciler(local, nil)
		// The second call sees what the first wrote, and must find nothing to write.
		for i := range 2 {
			got := &mcsv1beta1.ServiceExport{}
			if err := local.Get(ctx, client.ObjectKeyFromObject(se), got); err != nil {
				t.Fatal(err)
			}
			if err := r.exportStatus(ctx, got, c.valid, c.exported, c.publishErr, c.merged); err != nil {
				t.Fatalf("%s: call %d: %v", c.name, i+1, err)
			}
			if n := local.writes.Load(); n != 1 {
				t.Errorf("%s: %d writes after call %d, want 1", c.name, n, i+1)
			}
		}
		got := &mcsv1beta1.ServiceExport{}
		if err := local.Get(ctx, client.ObjectKeyFromObject(se), got); err != nil {
			t.Fatal(err)
		}
		var summary []string
		for _, cd := range got.Status.Conditions {
			summary = append(summary, fmt.Sprintf("%s=%s/%s", cd.Type, cd.Status, cd.Reason))
		}
		slices.Sort(summary)
		if !slices.Equal(summary, c.want) {
			t.Errorf("%s: conditions %v, want %v", c.name, summary, c.want)
		}
		ready := meta.FindStatusCondition(got.Status.Conditions, string(mcsv1beta1.ServiceExportConditionReady))
		if ready == nil || !strings.Contains(ready.Message, c.readyMsg) || ready.ObservedGeneration != se.Generation {
			t.Errorf("%s: Ready = %+v, want generation %d and a message with %q", c.name, ready, se.Generation, c.readyMsg)
		}
	}
}

// TestReadyMissingSlices: an import waits for the slices its exporters' records count, Pending, but not forever:
// past missingSlicesWait it says which exporter's slices did not come, and it turns Ready once they do.
func TestReadyMissingSlices(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	want := &mcsv1beta1.ServiceImport{ObjectMeta: objMeta("ns", "web"), Spec: mcsv1beta1.ServiceImportSpec{
		Type: mcsv1beta1.ClusterSetIP, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, IPs: []string{"10.0.0.1"}}}
	const missing = "the endpoints of b (0 of 2 EndpointSlices)"
	cases := []struct {
		name    string
		waited  time.Duration
		missing string
		reason  string
		msg     string // in the condition's message
	}{
		{"within the hold: nothing written", readyHold / 2, missing, "", ""},
		{"after the hold", readyHold, missing, string(mcsv1beta1.ServiceImportReasonPending), "Waiting for " + missing + "."},
		{"just before the wait ends", missingSlicesWait - time.Second, missing, string(mcsv1beta1.ServiceImportReasonPending), missing},
		{"after the wait", missingSlicesWait, missing, imports.ReasonEndpointSlicesMissing, fmt.Sprintf("Waited %v for %s:", missingSlicesWait, missing)},
		{"long after the wait", 10 * time.Hour, missing, imports.ReasonEndpointSlicesMissing, missing},
		{"the slices came after the wait", 10 * time.Hour, "", string(mcsv1beta1.ServiceImportReasonReady), "programmed"},
	}
	for _, c := range cases {
		r := testReconciler(nil, nil)
		r.readyWaits.since[key] = time.Now().Add(-c.waited)
		si := &mcsv1beta1.ServiceImport{ObjectMeta: objMeta("ns", "web")}
		si.Generation = 2
		got, requeue := r.ready(si, want, want.Spec.IPFamilies, nil, c.missing)
		switch {
		case c.reason == "" && (got != nil || requeue <= 0):
			t.Errorf("%s: condition %+v, requeue %v; want none, and a requeue", c.name, got, requeue)
		case c.reason != "" && (got == nil || got.Reason != c.reason || !strings.Contains(got.Message, c.msg) ||
			(got.Status == metav1.ConditionTrue) != (c.reason == string(mcsv1beta1.ServiceImportReasonReady))):
			t.Errorf("%s: condition %+v, want reason %s with a message containing %q", c.name, got, c.reason, c.msg)
		case c.missing != "" && c.reason != "" && (requeue < readyRecheck || requeue > maxReadyRecheck):
			t.Errorf("%s: requeue %v, want a recheck within [%v, %v]: the slices may come yet", c.name, requeue, readyRecheck, maxReadyRecheck)
		}
	}
}
