package cli

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// pollInterval is how often export and unexport look at the ServiceExport while they wait.
const pollInterval = 250 * time.Millisecond

// exportService creates the ServiceExport (keeping one that exists) and waits until it is Ready. It fails at
// once when the controller finds it invalid, and after timeout with the conditions it last saw.
func exportService(ctx context.Context, c client.Client, key types.NamespacedName, timeout time.Duration) (*mcsv1beta1.ServiceExport, error) {
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if err := c.Create(ctx, se); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating ServiceExport %s: %w", key, err)
	}
	var last []metav1.Condition
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, se); err != nil {
			return false, err
		}
		last = se.Status.Conditions
		if v := meta.FindStatusCondition(last, string(mcsv1beta1.ServiceExportConditionValid)); v != nil && v.Status == metav1.ConditionFalse {
			return false, fmt.Errorf("ServiceExport %s is not valid: %s: %s (%w)", key, v.Reason, v.Message, ErrUnhealthy)
		}
		return meta.IsStatusConditionTrue(last, string(mcsv1beta1.ServiceExportConditionReady)), nil
	})
	if wait.Interrupted(err) {
		return nil, fmt.Errorf("ServiceExport %s not Ready after %s (conditions: %s): is the mcs-controller running? (%w)", key, timeout, conditionsText(last), ErrUnhealthy)
	}
	return se, err
}

// unexportService deletes the ServiceExport and waits until it is gone; deleting one that does not exist is an
// error, as kubectl delete says.
func unexportService(ctx context.Context, c client.Client, key types.NamespacedName, timeout time.Duration) error {
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if err := c.Delete(ctx, se); err != nil {
		return fmt.Errorf("deleting ServiceExport %s: %w", key, err)
	}
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, key, se)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if wait.Interrupted(err) {
		return fmt.Errorf("ServiceExport %s still exists after %s (finalizers: %v)", key, timeout, se.Finalizers)
	}
	return err
}

func conditionsText(conds []metav1.Condition) string {
	if len(conds) == 0 {
		return "none"
	}
	s := ""
	for i, c := range conds {
		if i > 0 {
			s += ", "
		}
		s += c.Type + "=" + string(c.Status) + "/" + c.Reason
	}
	return s
}
