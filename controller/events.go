package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "vksfleet.dev/fleet/api/about/v1alpha1"
	"vksfleet.dev/fleet/controller/admit"
	"vksfleet.dev/fleet/controller/broker"
	"vksfleet.dev/fleet/controller/imports"
)

// maxNote is the longest note the events API takes.
const maxNote = 1024

// conditionEvents records an Event on obj for every condition whose status or reason changed from before to
// after, with the condition's reason: `kubectl describe` and `kubectl events` then tell what happened to an export
// or an import, and when, where its status holds only the last state. A condition that appears in its healthy state
// goes unrecorded but for Ready: every new export starts Valid and without Conflict, which its Ready event says.
func conditionEvents(rec events.EventRecorder, obj runtime.Object, before, after []metav1.Condition) {
	for _, c := range after {
		old := meta.FindStatusCondition(before, c.Type)
		// A refused derived Service's message is the API server's answer: a new answer is a new refusal.
		if old != nil && old.Status == c.Status && old.Reason == c.Reason &&
			(old.Message == c.Message || c.Reason != ReasonDerivedServiceRefused) {
			continue
		}
		healthy := c.Status == metav1.ConditionTrue
		if slices.Contains([]string{string(mcsv1beta1.ServiceExportConditionConflict), ConditionWithdrawalHeld, imports.ConditionStale, imports.ConditionUnreachable}, c.Type) {
			healthy = c.Status == metav1.ConditionFalse
		}
		if old == nil && healthy && c.Type != string(mcsv1beta1.ServiceExportConditionReady) {
			continue
		}
		kind := corev1.EventTypeNormal
		if !healthy {
			kind = corev1.EventTypeWarning
		}
		was := "unset"
		if old != nil {
			was = fmt.Sprintf("%s/%s", old.Status, old.Reason)
		}
		note := fmt.Sprintf("%s %s/%s (was %s): %s", c.Type, c.Status, c.Reason, was, c.Message)
		rec.Eventf(obj, nil, kind, c.Reason, c.Type, "%s", cutNote(note))
	}
}

// memberEvents records members' losses and returns on this member's cluster id ClusterProperty, the object that
// stands for the member in its own cluster: a member's liveness is no one service's. What a start first sees, and a
// member joining, are no loss or return, and record nothing.
type memberEvents struct {
	rec      events.EventRecorder
	liveness *broker.Liveness
	known    map[string]bool // each member's liveness as last recorded; nil before the first change
}

// changed is told of every member whose liveness the heartbeat saw change, as it sees it.
func (m *memberEvents) changed(member string, alive bool) {
	if m.known == nil {
		// The first change comes with the first view of every member: that view is what later changes are from.
		m.known = map[string]bool{}
		for id, state := range m.liveness.Members(time.Now()) {
			m.known[id] = state.Alive
		}
	}
	was, ok := m.known[member]
	m.known[member] = alive
	if !ok || was == alive {
		return
	}
	property := clusterIDProperty()
	if alive {
		m.rec.Eventf(property, nil, corev1.EventTypeNormal, "MemberReturned", "Observe",
			"Member %s renews its broker Lease again: its endpoints are imported.", member)
		return
	}
	m.rec.Eventf(property, nil, corev1.EventTypeWarning, "MemberLost", "Observe",
		"Member %s's broker Lease was not renewed within the lease grace, or is gone: its endpoints are withdrawn.", member)
}

// clusterIDProperty refers to this member's cluster id ClusterProperty, which Events about other members hang on:
// it stands for the member in its own cluster, and every member has it.
func clusterIDProperty() *aboutv1alpha1.ClusterProperty {
	property := &aboutv1alpha1.ClusterProperty{}
	property.SetGroupVersionKind(aboutv1alpha1.GroupVersion.WithKind("ClusterProperty"))
	property.Name = aboutv1alpha1.ClusterIDName
	return property
}

// cutNote cuts note to what the events API takes.
func cutNote(note string) string {
	if len(note) > maxNote {
		return strings.ToValidUTF8(note[:maxNote-3], "") + "..."
	}
	return note
}

// limitEvent records a Warning Event on the service's ServiceImport for what a limit left out of its import, with
// the member that published it. The first gather of a service comes before its ServiceImport is created: the
// Event then names the import without its uid.
func limitEvent(ctx context.Context, local client.Reader, rec events.EventRecorder, key types.NamespacedName, from string, p admit.Problem) {
	si := &mcsv1beta1.ServiceImport{}
	if err := local.Get(ctx, key, si); err != nil {
		si = &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	}
	rec.Eventf(si, nil, corev1.EventTypeWarning, p.Reason, "Import", "Member %s: %s.", from, p.Message)
}

// recordEvent records a Warning Event on this member's cluster id ClusterProperty for another member's export record
// that the import of the service refused whole (admitRecord): no ServiceImport here carries it, as none is made of
// the record, and its service may have a name or namespace no object can have.
func recordEvent(rec events.EventRecorder, key types.NamespacedName, from string, p admit.Problem) {
	rec.Eventf(clusterIDProperty(), nil, corev1.EventTypeWarning, p.Reason, "Import", "%s", cutNote(fmt.Sprintf(
		"Member %s's export of %s is not imported: %s.", from, key, p.Message)))
}
