package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/mcs/mcsversion"
)

func (o *options) exportCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "export SERVICE [-n NAMESPACE] [--context CONTEXT]", Short: "Create the Service's ServiceExport and wait until it is Ready"}
	return o.serviceExportCommand(cmd, "how long to wait for the export to be Ready", func(ctx context.Context, c client.Client, key types.NamespacedName, timeout time.Duration) (string, error) {
		se, err := exportService(ctx, c, key, timeout)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("exported (%s)", conditionsText(se.Status.Conditions)), nil
	})
}

// serviceExportCommand completes cmd as export's or unexport's command, which acts on one Service's ServiceExport
// in one member: it resolves them (exportTarget), runs act, which waits at most --timeout (wait says for what), and
// prints "serviceexport <namespace>/<name>" and what act says it did.
func (o *options) serviceExportCommand(cmd *cobra.Command, wait string,
	act func(ctx context.Context, c client.Client, key types.NamespacedName, timeout time.Duration) (string, error)) *cobra.Command {
	var timeout time.Duration
	cmd.Args = cobra.ExactArgs(1)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, key, err := o.exportTarget(args[0])
		if err != nil {
			return err
		}
		did, err := act(cmd.Context(), c, key, timeout)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.streams.Out, "serviceexport %s %s\n", key, did)
		return err
	}
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, wait)
	return cmd
}

// exportTarget is a client of --context (default the current one) and the service in -n (default the context's
// namespace), as kubectl resolves them.
func (o *options) exportTarget(name string) (client.Client, types.NamespacedName, error) {
	if o.broker != "" {
		return nil, types.NamespacedName{}, fmt.Errorf("--broker-context names the broker, and export talks to the member: name it with --context")
	}
	loader := o.config.ToRawKubeConfigLoader()
	ns, _, err := loader.Namespace()
	if err != nil {
		return nil, types.NamespacedName{}, err
	}
	cfg, err := o.config.ToRESTConfig()
	if err != nil {
		return nil, types.NamespacedName{}, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, types.NamespacedName{}, err
	}
	gv, err := mcsversion.Detect(dc)
	if err != nil {
		return nil, types.NamespacedName{}, err
	}
	c, err := newClient(cfg, gv)
	return c, types.NamespacedName{Namespace: ns, Name: name}, err
}

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
