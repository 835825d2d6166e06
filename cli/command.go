package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/mcs/mcsversion"
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

// options are the flags every subcommand shares.
type options struct {
	config        *genericclioptions.ConfigFlags
	streams       genericiooptions.IOStreams
	contexts      []string
	broker        string
	dns           []string
	inCluster     bool
	image         string
	verbose       int
	output        string
	allNamespaces bool
}

// NewCommand is the kubectl-mcs command tree.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{config: genericclioptions.NewConfigFlags(true), streams: streams}
	root := &cobra.Command{
		Use:   "kubectl-mcs",
		Short: "Install, see and diagnose a Multi-Cluster Services clusterset from one kubeconfig",
		Long: `kubectl mcs talks to the broker (--context, default the context "broker", else the current context), learns
the members' cluster ids from their namespaces and Leases there, and reads each member through the kubeconfig
context whose cluster id matches (or the --contexts given). --as, --as-group, --token and --request-timeout apply
to every cluster it talks to. export, unexport, join, unjoin and rotate act on one member, and broker init on the broker:
each names its cluster with --context, as kubectl does.

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
	pf.StringVar(&o.image, "image", defaultProbeImage, "the --in-cluster pod's image, which must have dig (e.g. nicolaka/netshoot)")
	pf.IntVarP(&o.verbose, "v", "v", 0, "verbosity: 1 says which contexts were left out and why")
	pf.Lookup("v").NoOptDefVal = "1"
	root.AddCommand(o.versionCommand())
	root.AddCommand(o.statusCommand(), o.servicesCommand(), o.diagnoseCommand(), o.exportCommand(), o.unexportCommand())
	root.AddCommand(o.brokerCommand(), o.joinCommand(), o.unjoinCommand(), o.rotateCommand())
	return root
}

func (o *options) addOutput(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "output format: wide, json or yaml")
}

func (o *options) addAllNamespaces(cmd *cobra.Command) {
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "every namespace (the default without -n)")
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
			s, err := o.snapshot(cmd.Context(), true, nil)
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
			ns, err := o.namespace()
			if err != nil {
				return err
			}
			if err := validateOutput(o.output); err != nil {
				return err
			}
			s, err := o.snapshot(cmd.Context(), false, nil)
			if err != nil {
				return err
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			rows := Matrix(s, ns, name)
			return print(o.streams.Out, o.output, servicesTable(rows), map[string]any{"services": rows})
		},
	}
	o.addOutput(cmd)
	o.addAllNamespaces(cmd)
	return cmd
}

func (o *options) diagnoseCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "diagnose [NAME | NAMESPACE/NAME]",
		Short: "Check the clusterset, and every exported service (or one), printing a PASS, FAIL or UNKNOWN line per check with a hint",
		Long: `diagnose checks that every member is reachable and has the CRDs, that its Corefile has the multicluster stanza and
its DNS serves clusterset.local, that its broker Lease is fresh and its clock agrees with the broker's, that it
holds no slices of a cluster that left; and per service: the ServiceExport is Valid, Ready and without Conflict,
the import exists wherever the namespace does, matches the broker, and the member's DNS resolves it (NXDOMAIN
where the namespace is absent, and for <clusterid>.<svc>.<ns>).
It exits 0 when no check fails, 1 when one does; UNKNOWN (something the plugin cannot see, such as a DNS
server it cannot reach: see --dns and --in-cluster) does not fail.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, err := o.namespace()
			if err != nil {
				return err
			}
			if err := validateOutput(o.output); err != nil {
				return err
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
				if n, rest, ok := strings.Cut(name, "/"); ok {
					ns, name = n, rest
				}
			}
			s, err := o.snapshot(cmd.Context(), true, func(s *Snapshot) []types.NamespacedName { return s.services(ns, name) })
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
	o.addAllNamespaces(cmd)
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

// namespace is -n when given; status, services and diagnose span every namespace otherwise, as with -A: a
// clusterset's services are spread over namespaces, and the context's default namespace says nothing of them.
func (o *options) namespace() (string, error) {
	ns := ""
	if o.config.Namespace != nil {
		ns = *o.config.Namespace
	}
	if ns != "" && o.allNamespaces {
		return "", fmt.Errorf("-n %s and -A (--all-namespaces) exclude each other: give one", ns)
	}
	return ns, nil
}

// singleClusterFlags are the ConfigFlags that name one cluster's address or credentials: kubectl mcs talks to
// several clusters, each through its context, so it refuses them rather than ignore them or apply them to all.
func (o *options) singleClusterFlags() []string {
	var set []string
	for name, v := range map[string]*string{
		"cluster": o.config.ClusterName, "user": o.config.AuthInfoName, "server": o.config.APIServer,
		"tls-server-name": o.config.TLSServerName, "certificate-authority": o.config.CAFile,
		"client-certificate": o.config.CertFile, "client-key": o.config.KeyFile,
		"username": o.config.Username, "password": o.config.Password,
	} {
		if v != nil && *v != "" {
			set = append(set, "--"+name)
		}
	}
	slices.Sort(set)
	return set
}

// restConfig is the config of a context, with the flags that apply to every cluster (--as, --as-group, --as-uid,
// --as-user-extra, --token, --insecure-skip-tls-verify) bound as kubectl binds them, and the request timeout.
func (o *options) restConfig(name string, timeout time.Duration) (*rest.Config, error) {
	f := &genericclioptions.ConfigFlags{
		KubeConfig: o.config.KubeConfig, Context: &name, BearerToken: o.config.BearerToken,
		Impersonate: o.config.Impersonate, ImpersonateUID: o.config.ImpersonateUID,
		ImpersonateGroup: o.config.ImpersonateGroup, ImpersonateUserExtra: o.config.ImpersonateUserExtra,
		Insecure: o.config.Insecure,
	}
	cfg, err := f.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("context %s: %w", name, err)
	}
	cfg.Timeout, cfg.QPS, cfg.Burst = timeout, 50, 100
	return cfg, nil
}

// brokerConfig resolves the broker's context and its config, refusing flags that cannot apply to every cluster.
func (o *options) brokerConfig(raw clientcmdapi.Config, timeout time.Duration) (string, *rest.Config, error) {
	if set := o.singleClusterFlags(); len(set) > 0 {
		return "", nil, fmt.Errorf("%s name one cluster's address or credentials, and kubectl mcs talks to several: put them in the kubeconfig's contexts",
			strings.Join(set, ", "))
	}
	contextFlag := ""
	if o.config.Context != nil {
		contextFlag = *o.config.Context
	}
	name, err := brokerContext(slices.Sorted(maps.Keys(raw.Contexts)), raw.CurrentContext, contextFlag, o.broker)
	if err != nil {
		return "", nil, err
	}
	cfg, err := o.restConfig(name, timeout)
	return name, cfg, err
}

// brokerOf reads the kubeconfig and the request timeout, and resolves the broker's context and config, whose
// requests are bounded by the timeout, or by limit when it is shorter.
func (o *options) brokerOf(limit time.Duration) (raw clientcmdapi.Config, name string, cfg *rest.Config, timeout time.Duration, err error) {
	if raw, err = o.config.ToRawKubeConfigLoader().RawConfig(); err != nil {
		return raw, "", nil, 0, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	if timeout, err = o.requestTimeout(); err != nil {
		return raw, "", nil, 0, err
	}
	if limit > 0 {
		timeout = min(timeout, limit)
	}
	name, cfg, err = o.brokerConfig(raw, timeout)
	return raw, name, cfg, timeout, err
}

// snapshot reads the clusterset: the broker, which says who the members are, then every member through its
// context; probe asks each member's DNS, and dnsScope, when set, names the services whose DNS names it asks once
// the API data is read.
func (o *options) snapshot(ctx context.Context, probe bool, dnsScope func(*Snapshot) []types.NamespacedName) (*Snapshot, error) {
	raw, brokerCtx, brokerCfg, timeout, err := o.brokerOf(0)
	if err != nil {
		return nil, err
	}
	b, err := readBroker(ctx, brokerCtx, brokerCfg, time.Now)
	if err != nil {
		return nil, brokerError(brokerCtx, err)
	}
	if len(b.Members) == 0 {
		return nil, fmt.Errorf("the broker (context %s) has no member namespace or Lease: no cluster joined yet, or %s is not the broker (name it with --context)",
			brokerCtx, brokerCtx)
	}
	candidates, err := o.candidates(raw, brokerCtx)
	if err != nil {
		return nil, err
	}
	probes := make([]contextProbe, len(candidates))
	var wg sync.WaitGroup
	for i, name := range candidates {
		wg.Go(func() {
			probes[i] = contextProbe{context: name}
			cfg, err := o.restConfig(name, timeout)
			if err == nil {
				probes[i].clusterID, probes[i].clusterSet, err = readClusterID(ctx, cfg, min(timeout, contextProbeTimeout))
			}
			probes[i].err = err
		})
	}
	wg.Wait()
	matches, notes, err := matchContexts(b.Members, probes, len(o.contexts) > 0)
	if err != nil {
		return nil, err
	}
	if o.verbose > 0 {
		for _, n := range notes {
			fmt.Fprintln(o.streams.ErrOut, n)
		}
	}
	dnsFlags, err := parseDNSFlags(o.dns, matches)
	if err != nil {
		return nil, err
	}
	srcs := make([]source, len(matches))
	configs := map[string]*rest.Config{}
	for i, m := range matches {
		srcs[i] = source{memberMatch: m, inCluster: o.inCluster}
		if m.context != "" && m.err == nil {
			srcs[i].config, srcs[i].err = o.restConfig(m.context, timeout)
			configs[m.context] = srcs[i].config
		}
		if !o.inCluster {
			srcs[i].dns, srcs[i].dnsSource = dnsAddress(m, dnsFlags)
		}
	}
	s := collect(ctx, srcs, b, time.Now)
	if !probe {
		return s, nil
	}
	var scope []types.NamespacedName
	if dnsScope != nil {
		scope = dnsScope(s)
	}
	probeDNS(ctx, s, scope, func(m *Member) resolver {
		if o.inCluster {
			m.DNS, m.DNSSource = inClusterAddress, inClusterSource
			return podResolver(configs[m.Context], o.image)
		}
		if m.DNS == "" {
			return nil
		}
		return addressResolver(m.DNS)
	})
	return s, nil
}

// candidates are the contexts that may reach members: --contexts, else every context but the broker's.
func (o *options) candidates(raw clientcmdapi.Config, brokerCtx string) ([]string, error) {
	if len(o.contexts) == 0 {
		var out []string
		for name := range raw.Contexts {
			if name != brokerCtx {
				out = append(out, name)
			}
		}
		return out, nil
	}
	var unknown []string
	for _, c := range o.contexts {
		if _, ok := raw.Contexts[c]; !ok {
			unknown = append(unknown, c)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("--contexts: not in the kubeconfig: %s", strings.Join(unknown, ", "))
	}
	if slices.Contains(o.contexts, brokerCtx) {
		return nil, fmt.Errorf("--contexts names %s, the broker's context: list member contexts only", brokerCtx)
	}
	return slices.Compact(slices.Sorted(slices.Values(o.contexts))), nil
}

// brokerError says what failed reading the broker, and for a refusal, whose rights are lacking.
func brokerError(context string, err error) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("reading the broker (context %s): %w: the user (the context's, or --as/--token) needs read access to the members' namespaces, Leases, ServiceImports and EndpointSlices there", context, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("reading the broker (context %s): %w: the context's credentials (or --token) are not accepted", context, err)
	default:
		return fmt.Errorf("reading the broker (context %s): %w: check its address and credentials with kubectl --context %s get --raw /version", context, err, context)
	}
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
