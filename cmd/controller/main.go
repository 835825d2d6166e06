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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"vksfleet.dev/fleet/controller"
	"vksfleet.dev/fleet/controller/export"
	"vksfleet.dev/fleet/mcs/names"
)

// flags are the command line, parsed and checked.
type flags struct {
	kubeconfig, brokerKubeconfig string
	brokerSecret                 types.NamespacedName
	qps                          float64
	burst                        int
	// opts are the controller's settings; run adds the client configurations.
	opts controller.Options
	// printBrokerNamespace asks only for the broker namespace of --cluster-id, for the broker's RBAC overlay.
	printBrokerNamespace bool
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
	fs.StringVar(&f.opts.ClusterID, "cluster-id", "", "override the cluster id of the cluster.clusterset.k8s.io ClusterProperty")
	fs.DurationVar(&f.opts.LeaseGrace, "lease-grace", controller.DefaultLeaseGrace, "how long a member's broker Lease may go unrenewed before its endpoints are withdrawn")
	fs.Float64Var(&f.qps, "qps", 200, "client queries per second to each API server")
	fs.IntVar(&f.burst, "burst", 400, "client burst to each API server")
	fs.IntVar(&f.opts.Workers, "workers", controller.DefaultWorkers, "services reconciled concurrently")
	fs.BoolVar(&f.opts.ClusterLocalServices, "cluster-local-services", false,
		"also reflect every import into this cluster's cluster.local as the headless Service <svc>-clusterset, for a DNS that cannot serve clusterset.local; off deletes them")
	fs.StringVar(&f.opts.DNSAddress, "dns-address", "",
		"host:port of this cluster's DNS server for clusterset.local; a ServiceImport is Ready only once it answers the import. Empty: Ready does not wait for DNS")
	fs.BoolVar(&f.opts.LeaderElection, "leader-elect", false, "elect one active replica through a Lease in the member cluster")
	fs.StringVar(&f.opts.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease; default the pod's namespace")
	fs.StringVar(&f.opts.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "address serving /healthz and /readyz; 0 disables")
	fs.StringVar(&f.opts.MetricsBindAddress, "metrics-bind-address", ":8080", "address serving Prometheus metrics; 0 disables")
	fs.BoolVar(&f.printBrokerNamespace, "print-broker-namespace", false, "print the broker namespace of --cluster-id, which the broker's RBAC for that member names, and exit")
	denied := fs.String("denied-export-namespaces", strings.Join(export.DefaultDeniedNamespaces, ","),
		"comma-separated namespaces whose ServiceExports are refused (Valid=False, NamespaceNotAllowed); empty refuses none")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	// Empty but not nil: an empty flag refuses no namespace, where nil would mean the default list.
	f.opts.DeniedExportNamespaces = []string{}
	for ns := range strings.SplitSeq(*denied, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			f.opts.DeniedExportNamespaces = append(f.opts.DeniedExportNamespaces, ns)
		}
	}
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
	if f.qps <= 0 || f.burst <= 0 {
		errs = append(errs, fmt.Errorf("--qps %v and --burst %d must be positive", f.qps, f.burst))
	}
	errs = append(errs, f.opts.Validate())
	return f, errors.Join(errs...)
}

func main() {
	ctrl.SetLogger(klog.NewKlogr())
	f, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
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
	brokerCfg, err := brokerConfig(ctx, f, local)
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	brokerCfg.QPS, brokerCfg.Burst = float32(f.qps), f.burst
	opts := f.opts
	opts.Local, opts.Broker = local, brokerCfg
	return controller.Run(ctx, opts)
}

// restConfig loads a kubeconfig file, or the in-cluster config / $KUBECONFIG when path is empty.
func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		return ctrl.GetConfig()
	}
	return clientcmd.BuildConfigFromFlags("", path)
}

// brokerConfig loads the broker's kubeconfig from its file or from the Secret in the member cluster.
func brokerConfig(ctx context.Context, f flags, local *rest.Config) (*rest.Config, error) {
	if f.brokerKubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", f.brokerKubeconfig)
	}
	c, err := client.New(local, client.Options{})
	if err != nil {
		return nil, err
	}
	secret := &corev1.Secret{}
	if err := c.Get(ctx, f.brokerSecret, secret); err != nil {
		return nil, fmt.Errorf("reading Secret %s: %w", f.brokerSecret, err)
	}
	kubeconfig, ok := secret.Data["kubeconfig"]
	if !ok {
		return nil, fmt.Errorf("secret %s has no key \"kubeconfig\"", f.brokerSecret)
	}
	return clientcmd.RESTConfigFromKubeConfig(kubeconfig)
}
