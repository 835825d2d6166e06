package framework

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// ExportCondition returns the condition of the ServiceExport namespace/name that c reaches, nil when it has none
// (yet).
func ExportCondition(ctx context.Context, c client.Client, namespace, name, condition string) (*metav1.Condition, error) {
	se := &mcsv1beta1.ServiceExport{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, se); err != nil {
		return nil, err
	}
	return meta.FindStatusCondition(se.Status.Conditions, condition), nil
}

// WantExportCondition says why the ServiceExport's condition is not status with a reason that contains reason
// (any reason when empty), or returns nil when it is: for a poll.
func WantExportCondition(ctx context.Context, c client.Client, namespace, name, condition string, status metav1.ConditionStatus, reason string) error {
	got, err := ExportCondition(ctx, c, namespace, name, condition)
	if err != nil {
		return err
	}
	if got == nil || got.Status != status || !strings.Contains(got.Reason, reason) {
		return fmt.Errorf("ServiceExport %s/%s: %s is %+v, want %s %s", namespace, name, condition, got, status, reason)
	}
	return nil
}
