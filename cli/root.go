package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// ErrUnhealthy is returned when the command ran and found the clusterset unhealthy: a diagnose check failed, or
// an export did not become Ready. What failed is already printed, so the caller only exits with ExitUnhealthy.
var ErrUnhealthy = errors.New("the clusterset is unhealthy")

// ErrChecksFailed is diagnose's ErrUnhealthy: the table already said which checks failed, so the caller prints
// nothing more.
var ErrChecksFailed = fmt.Errorf("diagnose: checks failed: %w", ErrUnhealthy)

// The plugin's exit codes, for scripts: healthy, unhealthy (a FAIL), and could not run (bad flags, a kubeconfig
// error, the broker unreachable).
const (
	ExitHealthy     = 0
	ExitUnhealthy   = 1
	ExitCouldNotRun = 2
)

// ExitCode is the exit code for an error the command returned.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return ExitHealthy
	case errors.Is(err, ErrUnhealthy):
		return ExitUnhealthy
	default:
		return ExitCouldNotRun
	}
}

// defaultRequestTimeout bounds each request when --request-timeout is not set, so that an unreachable member is
// reported rather than waited for.
const defaultRequestTimeout = 10 * time.Second

// contextProbeTimeout bounds reading a context's cluster id: every context of the kubeconfig is read to find the
// members, and one that does not answer by then is taken for unreachable.
const contextProbeTimeout = 5 * time.Second

// NewCommand is the kubectl-mcs command tree.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{config: genericclioptions.NewConfigFlags(true), streams: streams}
	root := &cobra.Command{
		Use:   "kubectl-mcs",
		Short: "Install, see and diagnose a Multi-Cluster Services clusterset from one kubeconfig",
		Long: `kubectl mcs talks to the broker (--context, default the context "broker", else the current context), learns
the members' cluster ids from their namespaces and Leases there, and reads each member through the kubeconfig
context whose cluster id matches (or the --contexts given). --as, --as-group, --token and --request-timeout apply
to every cluster it talks to. export, unexport, join, unjoin and rotate act on one member, and broker init and broker
uninstall on the broker: each names its cluster with --context, as kubectl does. broker evict and unjoin --broker-only
take a member out of the broker through the broker-info file alone, for a member that is gone or not trusted.

Exit codes: 0 healthy, 1 unhealthy (a diagnose check failed), 2 could not run.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	o.config.AddFlags(root.PersistentFlags())
	pf := root.PersistentFlags()
	pf.StringSliceVar(&o.contexts, "contexts", nil, "member contexts, comma-separated; default every context whose cluster id is a member of the broker")
	pf.StringVar(&o.broker, "broker-context", "", "alias of --context: the broker's context")
	pf.StringArrayVar(&o.dns, "dns", nil, "a member's DNS server as member=host:port, the member named by context or cluster id (repeatable); default $FLEET_DNS_<MEMBER>, else its kube-dns Service")
	pf.BoolVar(&o.inCluster, "in-cluster", false, "ask each member's DNS from a short-lived pod (kubectl exec of dig), as its pods see it")
	pf.StringVar(&o.image, "image", defaultProbeImage, "the --in-cluster pod's image: our mcs-controller's (this plugin's version by default, or a mirror's), or any with sleep and dig (e.g. nicolaka/netshoot)")
	pf.IntVarP(&o.verbose, "v", "v", 0, "verbosity: 1 says which contexts were left out and why")
	pf.Lookup("v").NoOptDefVal = "1"
	root.AddCommand(o.versionCommand())
	root.AddCommand(o.statusCommand(), o.servicesCommand(), o.diagnoseCommand(), o.exportCommand(), o.unexportCommand())
	root.AddCommand(o.brokerCommand(), o.joinCommand(), o.unjoinCommand(), o.rotateCommand())
	root.AddCommand(o.dnsProbeCommand(), o.dnsCommand())
	return root
}

func (o *options) addOutput(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "output format: wide, json or yaml")
}

func (o *options) addAllNamespaces(cmd *cobra.Command) {
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "every namespace (the default without -n)")
}

// A view is what a read command prints: the table, the object -o json and yaml print, and then, when set, done,
// which prints what follows the table and returns the command's error (diagnose's summary and failed checks).
type view struct {
	table  *metav1.Table
	object any
	done   func() error
}

// readCommand completes cmd as a command that reads the clusterset and prints a view of it, with -o, and with -A
// when namespaced: it checks -n against -A and -o before reading anything, then run reads what it needs (see
// options.snapshot) for the namespace (-n; "" for all) and the arguments, and returns the view to print.
func (o *options) readCommand(cmd *cobra.Command, namespaced bool,
	run func(ctx context.Context, ns string, args []string) (view, error)) *cobra.Command {
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ns := ""
		if namespaced {
			var err error
			if ns, err = o.namespace(); err != nil {
				return err
			}
		}
		if err := validateOutput(o.output); err != nil {
			return err
		}
		v, err := run(cmd.Context(), ns, args)
		if err != nil {
			return err
		}
		if err := print(o.streams.Out, o.output, v.table, v.object); err != nil || v.done == nil {
			return err
		}
		return v.done()
	}
	o.addOutput(cmd)
	if namespaced {
		o.addAllNamespaces(cmd)
	}
	return cmd
}
