// Command controller is the mcs-controller, run once per member cluster: it publishes the member's
// ServiceExports to the broker and imports every service the clusterset exports.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"vksfleet.dev/fleet/controller"
	"vksfleet.dev/fleet/controller/brokercreds"
	"vksfleet.dev/fleet/controller/export"
	"vksfleet.dev/fleet/mcs/names"
)

// flags are the command line, parsed and checked.
type flags struct {
	kubeconfig, brokerKubeconfig string
	brokerSecret                 types.NamespacedName
	qps                          float64
	burst                        int
	// renewBefore is --broker-token-renew-before; 0 renews at 80% of a token's lifetime.
	renewBefore time.Duration
	// opts are the controller's settings; run adds the client configurations.
	opts controller.Options
	// printBrokerNamespace asks only for the broker namespace of --cluster-id, for the broker's RBAC overlay.
	printBrokerNamespace bool
	// logging is the Kubernetes logging flags' configuration (-v, --vmodule, --logging-format), checked by
	// parseFlags and applied by main.
	logging *logsapi.LoggingConfiguration
}

// parseFlags parses and checks the arguments; every mistake is reported before anything connects.
func parseFlags(args []string, out io.Writer) (flags, error) {
	var f flags
	var secret string
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of the member cluster; default in-cluster config or $KUBECONFIG")
	fs.StringVar(&f.brokerKubeconfig, "broker-kubeconfig", "", "kubeconfig file of the broker")
	fs.StringVar(&secret, "broker-secret", "", "namespace/name of a Secret in the member cluster whose key `kubeconfig` reaches the broker")
	fs.DurationVar(&f.renewBefore, "broker-token-renew-before", 0,
		"renew the broker ServiceAccount token this long before it expires; 0, or a value not shorter than its lifetime, renews at 80% of its lifetime (and at once under a minute left)")
	fs.StringVar(&f.opts.ClusterID, "cluster-id", "", "override the cluster id of the cluster.clusterset.k8s.io ClusterProperty")
	fs.DurationVar(&f.opts.LeaseGrace, "lease-grace", controller.DefaultLeaseGrace, "how long a member's broker Lease may go unrenewed before its endpoints are withdrawn")
	fs.Float64Var(&f.qps, "qps", 200, "client queries per second to each API server")
	fs.IntVar(&f.burst, "burst", 400, "client burst to each API server")
	fs.IntVar(&f.opts.Workers, "workers", controller.DefaultWorkers, "services reconciled concurrently")
	fs.BoolVar(&f.opts.ClusterLocalServices, "cluster-local-services", false,
		"also reflect every import into this cluster's cluster.local as the headless Service <svc>-clusterset, for a DNS that cannot serve clusterset.local; off deletes them")
	fs.StringVar(&f.opts.DNSAddress, "dns-address", "",
		"host:port of this cluster's DNS server for clusterset.local; a ServiceImport is Ready only once it answers the import. Empty: Ready does not wait for DNS. A host ending in .svc (a Service's <name>.<namespace>.svc) is completed with --cluster-domain")
	fs.StringVar(&f.opts.ClusterDomain, "cluster-domain", controller.DefaultClusterDomain,
		"this cluster's DNS domain (the kubelet's --cluster-domain), which completes a --dns-address host ending in .svc")
	fs.BoolVar(&f.opts.DataPlaneProbe, "probe-data-plane", false,
		"probe from this pod whether each other member's endpoints answer, and stop using those that do not within about a second; keep a member's endpoints, marked Stale, when only its Lease lapsed. Needs the controller on the pod network")
	fs.DurationVar(&f.opts.StaleLimit, "stale-limit", controller.DefaultStaleLimit,
		"with --probe-data-plane: how long past its Lease grace a member whose control plane is lost keeps its endpoints in use while they answer; after it they are used only while no other exporter has ready endpoints")
	fs.IntVar(&f.opts.MaxEndpointsPerService, "max-endpoints-per-service", controller.DefaultMaxEndpointsPerService,
		"the most endpoints of one member's export of one service, imported or published: past it, the EndpointSlices after the first that fit, by name, are left out, and so are those past one for every 10 endpoints of it. At most 100000")
	fs.IntVar(&f.opts.MaxEndpointsPerMember, "max-endpoints-per-member", controller.DefaultMaxEndpointsPerMember,
		"the most endpoints imported from one member across all its services: a service takes what the member's others leave, first come, first served")
	fs.IntVar(&f.opts.MaxSlicesPerNamespace, "max-slices-per-namespace", controller.DefaultMaxSlicesPerNamespace,
		"the most EndpointSlices the exports of one namespace publish on the broker, so that one namespace cannot use up this member's broker quota")
	fs.BoolVar(&f.opts.LeaderElection, "leader-elect", false, "elect one active replica through a Lease in the member cluster")
	fs.StringVar(&f.opts.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease; default the pod's namespace")
	fs.StringVar(&f.opts.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "address serving /healthz and /readyz; 0 disables")
	fs.StringVar(&f.opts.MetricsBindAddress, "metrics-bind-address", ":8080", "address serving Prometheus metrics; 0 disables")
	fs.BoolVar(&f.printBrokerNamespace, "print-broker-namespace", false, "print the broker namespace of --cluster-id, which the broker's RBAC for that member names, and exit")
	f.logging = logsapi.NewLoggingConfiguration()
	logsapi.AddGoFlags(f.logging, fs)
	denied := fs.String("denied-export-namespaces", strings.Join(export.DefaultDeniedNamespaces, ","),
		"comma-separated namespaces whose ServiceExports are refused (Valid=False, NamespaceNotAllowed); empty refuses none")
	deniedImport := fs.String("denied-import-namespaces", "",
		"comma-separated namespaces no other cluster's export is imported into (its records refused, an earlier import deleted); unset: those of --denied-export-namespaces. kube-system, kube-public and kube-node-lease take no import whatever it says")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	f.opts.DeniedExportNamespaces = namespaceList(*denied)
	// Unset, the import side follows the export side (nil); set, even to nothing, it is what it says.
	fs.Visit(func(set *flag.Flag) {
		if set.Name == "denied-import-namespaces" {
			f.opts.DeniedImportNamespaces = namespaceList(*deniedImport)
		}
	})
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	switch {
	case f.printBrokerNamespace:
		if f.opts.ClusterID == "" {
			errs = append(errs, errors.New("--print-broker-namespace needs --cluster-id"))
		}
	case f.brokerKubeconfig == "" && secret == "":
		errs = append(errs, errors.New("one of --broker-kubeconfig and --broker-secret is required"))
	case f.brokerKubeconfig != "" && secret != "":
		errs = append(errs, errors.New("--broker-kubeconfig and --broker-secret exclude each other"))
	case secret != "":
		ns, name, ok := strings.Cut(secret, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			errs = append(errs, fmt.Errorf("--broker-secret %q is not namespace/name", secret))
		}
		f.brokerSecret = types.NamespacedName{Namespace: ns, Name: name}
	}
	if f.renewBefore < 0 {
		errs = append(errs, fmt.Errorf("--broker-token-renew-before %v must not be negative", f.renewBefore))
	}
	if f.qps <= 0 || f.burst <= 0 {
		errs = append(errs, fmt.Errorf("--qps %v and --burst %d must be positive", f.qps, f.burst))
	}
	if bad := logsapi.Validate(f.logging, nil, nil); len(bad) > 0 {
		errs = append(errs, fmt.Errorf("logging flags: %w", bad.ToAggregate()))
	}
	errs = append(errs, f.opts.Validate())
	return f, errors.Join(errs...)
}

// namespaceList reads a comma-separated list of namespaces. It is empty but not nil for none: an empty flag refuses
// no namespace, where nil would mean the default list.
func namespaceList(list string) []string {
	out := []string{}
	for ns := range strings.SplitSeq(list, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			out = append(out, ns)
		}
	}
	return out
}

func main() {
	f, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err == nil {
		// Before anything logs: klog, and so controller-runtime's logger, write in the chosen format from here on.
		err = logsapi.ValidateAndApply(f.logging, nil)
	}
	ctrl.SetLogger(klog.NewKlogr())
	defer logs.FlushLogs()
	if err == nil && f.printBrokerNamespace {
		fmt.Println(names.BrokerNamespace(f.opts.ClusterID))
		return
	}
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		err = run(ctx, f)
	}
	if err != nil {
		logs.FlushLogs()
		fmt.Fprintln(os.Stderr, "mcs-controller:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, f flags) error {
	local, err := restConfig(f.kubeconfig)
	if err != nil {
		return fmt.Errorf("member cluster: %w", err)
	}
	local.QPS, local.Burst = float32(f.qps), f.burst
	var source brokercreds.Source = &brokercreds.FileSource{Path: f.brokerKubeconfig, Interval: filePollInterval}
	if f.brokerKubeconfig == "" {
		kube, err := kubernetes.NewForConfig(local)
		if err != nil {
			return fmt.Errorf("member cluster: %w", err)
		}
		source = &brokercreds.SecretSource{Client: kube, Key: f.brokerSecret}
	}
	keeper := &brokercreds.Keeper{Source: source, RenewBefore: f.renewBefore, Log: ctrl.Log.WithName("broker-credentials")}
	keeper.Start(ctx)
	transport, err := waitForCredentials(ctx, keeper, f.opts.HealthProbeBindAddress)
	if ctx.Err() != nil {
		return nil // stopped while waiting: not a failure
	}
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	brokerCfg := transport.Config()
	brokerCfg.QPS, brokerCfg.Burst = float32(f.qps), f.burst
	opts := f.opts
	opts.Local, opts.Broker, opts.BrokerCredentials = local, brokerCfg, keeper
	return controller.Run(ctx, opts)
}

// filePollInterval is how often --broker-kubeconfig is read for a new credential.
const filePollInterval = 2 * time.Second

// waitForCredentials waits for the keeper's first valid broker kubeconfig. Meanwhile it serves /healthz (ok) and
// /readyz (failing, with the reason) on the health probe address, so that a Deployment applied before its
// Secret waits, not ready, rather than crash-looping; the manager serves both once the controller starts.
func waitForCredentials(ctx context.Context, keeper *brokercreds.Keeper, healthAddr string) (*brokercreds.Transport, error) {
	stop, err := controller.ServeProbes(healthAddr, keeper.Check)
	if err != nil {
		return nil, err
	}
	defer stop()
	return keeper.First(ctx)
}

// restConfig loads a kubeconfig file, or the in-cluster config / $KUBECONFIG when path is empty.
func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		return ctrl.GetConfig()
	}
	return clientcmd.BuildConfigFromFlags("", path)
}
