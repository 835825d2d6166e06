package mcsctl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/mcs/mcsversion"
)

// ErrChecksFailed is returned by diagnose when a check failed; the table already said which, so the caller only
// exits non-zero.
var ErrChecksFailed = errors.New("diagnose: checks failed")

// defaultRequestTimeout bounds each request when --request-timeout is not set, so that an unreachable member is
// reported rather than waited for.
const defaultRequestTimeout = 10 * time.Second

// options are the flags every subcommand shares.
type options struct {
	config   *genericclioptions.ConfigFlags
	streams  genericiooptions.IOStreams
	contexts []string
	broker   string
	dns      []string
	output   string
}

// NewCommand is the kubectl-mcs command tree.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{config: genericclioptions.NewConfigFlags(true), streams: streams}
	root := &cobra.Command{
		Use:   "kubectl-mcs",
		Short: "See and diagnose a Multi-Cluster Services clusterset from one kubeconfig",
		Long: `kubectl mcs reads every member cluster of a clusterset (the kubeconfig's contexts, or --contexts) and the
broker (--broker-context, default "broker"), and shows or diagnoses the clusterset as a whole.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	o.config.AddFlags(root.PersistentFlags())
	pf := root.PersistentFlags()
	pf.StringSliceVar(&o.contexts, "contexts", nil, "member contexts, comma-separated; default every context but the broker's")
	pf.StringVar(&o.broker, "broker-context", "", `the broker's context; default "broker" when the kubeconfig has it`)
	pf.StringArrayVar(&o.dns, "dns", nil, "a member's DNS server as member=host:port (repeatable); default $FLEET_DNS_<MEMBER>, else its kube-dns Service")
	root.AddCommand(o.statusCommand(), o.servicesCommand(), o.diagnoseCommand(), o.exportCommand(), o.unexportCommand())
	root.AddCommand(o.brokerCommand(), o.joinCommand(), o.unjoinCommand())
	return root
}

func (o *options) addOutput(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "output format: wide, json or yaml")
}

func (o *options) statusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Every member: cluster id, clusterset, controller, broker Lease, and whether its DNS serves clusterset.local",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := validateOutput(o.output); err != nil {
				return err
			}
			s, err := o.snapshot(cmd.Context(), nil)
			if err != nil {
				return err
			}
			rows := Status(s)
			return print(o.streams.Out, o.output, statusTable(rows), map[string]any{"members": rows})
		},
	}
	o.addOutput(cmd)
	return cmd
}

func (o *options) servicesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "services [NAME]",
		Short: "The services × clusters matrix: exported or imported, type, ClusterSetIP, endpoints per source, conflicts",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validateOutput(o.output); err != nil {
				return err
			}
			s, err := o.snapshot(cmd.Context(), nil)
			if err != nil {
				return err
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			rows := Matrix(s, o.namespaceFlag(), name)
			return print(o.streams.Out, o.output, servicesTable(rows), map[string]any{"services": rows})
		},
	}
	o.addOutput(cmd)
	return cmd
}

func (o *options) diagnoseCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "diagnose [NAME | NAMESPACE/NAME]",
		Short: "Check the clusterset, and every exported service (or one), printing a PASS or FAIL line per check with a hint",
		Long: `diagnose checks that every member is reachable and has the CRDs, that its Corefile has the multicluster stanza and
its DNS serves clusterset.local, that its broker Lease is fresh and its clock agrees with the broker's, that it
holds no slices of a cluster that left; and per service: the ServiceExport is Valid without Conflict, the import
exists wherever the namespace does, matches the broker, and the member's DNS resolves it.
It exits 0 only when no check fails; UNKNOWN (something the plugin cannot see) does not fail.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validateOutput(o.output); err != nil {
				return err
			}
			ns, name := o.namespaceFlag(), ""
			if len(args) == 1 {
				name = args[0]
				if n, rest, ok := strings.Cut(name, "/"); ok {
					ns, name = n, rest
				}
			}
			s, err := o.snapshot(cmd.Context(), func(s *Snapshot) []types.NamespacedName { return s.services(ns, name) })
			if err != nil {
				return err
			}
			scope := s.services(ns, name)
			if name != "" && len(scope) == 0 {
				return fmt.Errorf("no member or broker knows a service %q%s", name, inNamespace(ns))
			}
			checks := Diagnose(s, scope)
			if err := print(o.streams.Out, o.output, diagnoseTable(checks), map[string]any{"passed": Passed(checks), "checks": checks}); err != nil {
				return err
			}
			if o.output == outputTable || o.output == outputWide {
				if err := summary(o.streams.Out, checks); err != nil {
					return err
				}
			}
			if !Passed(checks) {
				return ErrChecksFailed
			}
			return nil
		},
	}
	o.addOutput(cmd)
	return cmd
}

func inNamespace(ns string) string {
	if ns == "" {
		return ""
	}
	return " in namespace " + ns
}

func (o *options) exportCommand() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "export SERVICE [-n NAMESPACE] [--context CONTEXT]",
		Short: "Create the Service's ServiceExport and wait until it is Ready",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, key, err := o.exportTarget(args[0])
			if err != nil {
				return err
			}
			se, err := exportService(cmd.Context(), c, key, timeout)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.streams.Out, "serviceexport %s exported (%s)\n", key, conditionsText(se.Status.Conditions))
			return err
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long to wait for the export to be Ready")
	return cmd
}

func (o *options) unexportCommand() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "unexport SERVICE [-n NAMESPACE] [--context CONTEXT]",
		Short: "Delete the Service's ServiceExport and wait until it is gone",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, key, err := o.exportTarget(args[0])
			if err != nil {
				return err
			}
			if err := unexportService(cmd.Context(), c, key, timeout); err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.streams.Out, "serviceexport %s unexported\n", key)
			return err
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long to wait for the ServiceExport to be gone")
	return cmd
}

// exportTarget is a client of --context (default the current one) and the service in -n (default the context's
// namespace), as kubectl resolves them.
func (o *options) exportTarget(name string) (client.Client, types.NamespacedName, error) {
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

// namespaceFlag is -n when given; status, services and diagnose span every namespace otherwise.
func (o *options) namespaceFlag() string {
	if o.config.Namespace == nil {
		return ""
	}
	return *o.config.Namespace
}

// snapshot reads the clusterset; dnsScope, when set, names the services whose DNS names each member's DNS is
// asked once the API data is read.
func (o *options) snapshot(ctx context.Context, dnsScope func(*Snapshot) []types.NamespacedName) (*Snapshot, error) {
	raw, err := o.config.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return nil, err
	}
	var all []string
	for name := range raw.Contexts {
		all = append(all, name)
	}
	slices.Sort(all)
	members, brokerCtx, err := selectContexts(all, o.contexts, o.broker)
	if err != nil {
		return nil, err
	}
	dnsFlags, err := parseDNSFlags(o.dns, members)
	if err != nil {
		return nil, err
	}
	timeout, err := o.requestTimeout()
	if err != nil {
		return nil, err
	}
	config := func(name string) (*rest.Config, error) {
		cfg, err := clientcmd.NewNonInteractiveClientConfig(raw, name, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
		if err != nil {
			return nil, err
		}
		cfg.Timeout, cfg.QPS, cfg.Burst = timeout, 50, 100
		return cfg, nil
	}
	srcs := make([]source, len(members))
	for i, name := range members {
		srcs[i] = source{context: name}
		srcs[i].config, srcs[i].err = config(name)
		srcs[i].dns, srcs[i].dnsSource = dnsAddress(name, dnsFlags)
	}
	var brokerSrc *source
	if brokerCtx != "" {
		brokerSrc = &source{context: brokerCtx}
		brokerSrc.config, brokerSrc.err = config(brokerCtx)
	}
	s := collect(ctx, srcs, brokerSrc, time.Now)
	var scope []types.NamespacedName
	if dnsScope != nil {
		scope = dnsScope(s)
	}
	probeDNS(ctx, s, scope)
	return s, nil
}

// requestTimeout is --request-timeout ("0" means the default here, not forever), read as kubectl reads it: a
// bare number is seconds.
func (o *options) requestTimeout() (time.Duration, error) {
	v := ""
	if o.config.Timeout != nil {
		v = *o.config.Timeout
	}
	if v == "" || v == "0" {
		return defaultRequestTimeout, nil
	}
	if n, err := strconv.Atoi(v); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("--request-timeout %q: %w", v, err)
	}
	return d, nil
}
