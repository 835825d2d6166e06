package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

func (o *options) unexportCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "unexport SERVICE [-n NAMESPACE] [--context CONTEXT]", Short: "Delete the Service's ServiceExport and wait until it is gone"}
	return o.serviceExportCommand(cmd, "how long to wait for the ServiceExport to be gone", func(ctx context.Context, c client.Client, key types.NamespacedName, timeout time.Duration) (string, error) {
		return "unexported", unexportService(ctx, c, key, timeout)
	})
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
