package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"vksfleet.dev/fleet/controller/admit"
	"vksfleet.dev/fleet/controller/export"
	"vksfleet.dev/fleet/mcs/clusterid"
	"vksfleet.dev/fleet/mcs/memberlease"
)

// Options configure one controller. Local and Broker are required; Run gives a zero setting the default its field
// states, then refuses the options if Validate reports any setting.
type Options struct {
	// Local reaches the member cluster the controller runs for.
	Local *rest.Config
	// Broker reaches the broker API server.
	Broker *rest.Config
	// BrokerCredentials, when set, tell which credential Broker sends (brokercreds.Keeper): the broker Lease
	// names it, and /readyz fails while its check does.
	BrokerCredentials BrokerCredentials
	// ClusterID overrides the cluster.clusterset.k8s.io ClusterProperty.
	ClusterID string
	// LeaseGrace is how long a member's broker Lease may go unrenewed before its endpoints are withdrawn;
	// default DefaultLeaseGrace.
	LeaseGrace time.Duration
	// Workers is how many services are reconciled at once; default DefaultWorkers.
	Workers int
	// DeniedExportNamespaces are the namespaces whose ServiceExports are refused (Valid=False,
	// NamespaceNotAllowed), whether or not the deploy manifests' admission policy is installed; nil means
	// export.DefaultDeniedNamespaces, and an empty non-nil list refuses none.
	DeniedExportNamespaces []string
	// DeniedImportNamespaces are the namespaces no other cluster's export is imported into: their records are
	// refused (admit.ReasonNamespaceNotAllowed) and an import there, made before, is deleted. nil means the
	// namespaces of DeniedExportNamespaces, so that a namespace opened to exports is opened to imports too; an
	// empty non-nil list refuses none but admit.AlwaysDeniedNamespaces (kube-system, kube-public,
	// kube-node-lease), which take no import whatever the setting.
	DeniedImportNamespaces []string
	// ClusterLocalServices reflects every import into the member's own cluster.local, for members whose DNS
	// cannot serve clusterset.local: a selector-less headless Service named names.ClusterLocalServiceName
	// ("<svc>-clusterset") whose EndpointSlices stock DNS answers (see imports.ClusterLocal). A Service of that
	// name the controller does not own is left alone and reported on the ServiceImport. Off, the controller
	// deletes the cluster-local Services and slices it made.
	ClusterLocalServices bool
	// DNSAddress (host:port) is this member's DNS server, serving clusterset.local: an import is Ready only once
	// the server answers it, so that Ready means the name resolves here. Empty, Ready does not wait for DNS. A
	// host that ends in ".svc" names a Service (<service>.<namespace>.svc) without the cluster domain, which
	// ClusterDomain completes into an absolute name, so that the pod's search path is not tried first.
	DNSAddress string
	// ClusterDomain is this member's cluster DNS domain (the kubelet's --cluster-domain); default
	// DefaultClusterDomain.
	ClusterDomain string
	// DataPlaneProbe measures from this member whether each other member's endpoints answer (a few TCP
	// connections per member every 300 ms, see dataPlaneProbe), and decides with that and the Lease: endpoints
	// that do not answer from here are imported not ready within about a second, though the exporter's Lease
	// lives, unless no other exporter of the service has a ready endpoint (and withdrawn once it lapses too); a
	// member whose Lease lapsed while its endpoints answer keeps them in use, marked Stale, for StaleLimit. It
	// needs the controller on the member's pod network (the Deployment), with routes to the other members' pods.
	// Off, the Lease alone decides, as a controller outside the pod network must.
	DataPlaneProbe bool
	// StaleLimit bounds how long, past its Lease grace, a member whose control plane is lost keeps its endpoints
	// in use because they still answer the data-plane probe: after it they are used only while no other exporter
	// of the service has a ready endpoint. Nothing refreshes a lost member's addresses, which its cluster may
	// hand to other pods meanwhile. Default DefaultStaleLimit.
	StaleLimit time.Duration
	// MaxEndpointsPerService bounds the endpoints of one member's export of one service, as this member imports
	// others' and publishes its own: past it, the EndpointSlices after the first that fit, by name, are refused
	// (or not published), and so are those past admit.SlicesPerService of it. At most maxEndpointsPerService;
	// default DefaultMaxEndpointsPerService.
	MaxEndpointsPerService int
	// MaxEndpointsPerMember bounds the endpoints imported from one member across all its exports: a service takes
	// what the member's other services leave, first come, first served. Default DefaultMaxEndpointsPerMember.
	MaxEndpointsPerMember int
	// MaxSlicesPerNamespace bounds the broker EndpointSlices that the exports of one namespace of this member
	// publish, so that one namespace's users cannot use up the member's broker quota that the others need. Default
	// DefaultMaxSlicesPerNamespace.
	MaxSlicesPerNamespace int
	// LeaderElection makes replicas elect one active controller through a Lease in LeaderElectionNamespace.
	LeaderElection          bool
	LeaderElectionNamespace string
	// HealthProbeBindAddress serves /healthz and /readyz; empty or "0" disables it.
	HealthProbeBindAddress string
	// MetricsBindAddress serves Prometheus metrics; empty or "0" disables it.
	MetricsBindAddress string
	// Logger logs; default the controller-runtime logger.
	Logger *logr.Logger
}

// BrokerCredentials are what the controller learns of the broker credential in use.
type BrokerCredentials interface {
	// ID names the credential in use, for the broker Lease's names.AnnotationCredential annotation.
	ID() string
	// Check is a /readyz check: an error while the credential is not the one the operator configured.
	Check(*http.Request) error
	// Renew renews the credential before it expires, until ctx ends; the manager runs it on the elected leader.
	Renew(ctx context.Context) error
}

// Defaults of the Options that Run gives a zero setting, and that cmd/controller's flags state.
const (
	// DefaultLeaseGrace is the default Options.LeaseGrace: the lease-age rule's (package memberlease), which
	// kubectl-mcs assumes for a Lease that records no duration.
	DefaultLeaseGrace = memberlease.DefaultGrace
	// DefaultWorkers is the default Options.Workers.
	DefaultWorkers = 16
	// DefaultClusterDomain is the default Options.ClusterDomain, the kubelet's and kubeadm's.
	DefaultClusterDomain = "cluster.local"
	// DefaultStaleLimit is the default Options.StaleLimit: longer than a controller's restarts take, up to the
	// kubelet's 5-minute crash-loop backoff, so that a routine control-plane outage moves no traffic.
	DefaultStaleLimit = 10 * time.Minute
	// DefaultMaxEndpointsPerService is the default Options.MaxEndpointsPerService: forty times the 250 endpoints
	// per service of Kubernetes' scalability thresholds, so that Deployments of a few thousand pods export whole.
	DefaultMaxEndpointsPerService = 10_000
	// DefaultMaxEndpointsPerMember is the default Options.MaxEndpointsPerMember: two thirds of the 150,000 pods of
	// the largest cluster Kubernetes' scalability thresholds describe.
	DefaultMaxEndpointsPerMember = 100_000
	// DefaultMaxSlicesPerNamespace is the default Options.MaxSlicesPerNamespace: a tenth of the 50,000
	// EndpointSlices of a member's broker quota (build/deploy/member), and five times the slices of a service at
	// the endpoint limit.
	DefaultMaxSlicesPerNamespace = 5_000
)

// maxEndpointsPerService is the largest Options.MaxEndpointsPerService: the endpoints of admit.MaxSlicesPerExport
// slices as the exporter fills them.
const maxEndpointsPerService = admit.MaxSlicesPerExport * export.MaxEndpointsPerSlice

// minLeaseGrace is the shortest Options.LeaseGrace: a broker Lease records its duration in whole seconds.
const minLeaseGrace = time.Second

// withDefaults returns o with each zero setting that has a default replaced by it.
func (o Options) withDefaults() Options {
	if o.LeaseGrace == 0 {
		o.LeaseGrace = DefaultLeaseGrace
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.StaleLimit == 0 {
		o.StaleLimit = DefaultStaleLimit
	}
	if o.MaxEndpointsPerService == 0 {
		o.MaxEndpointsPerService = DefaultMaxEndpointsPerService
	}
	if o.MaxEndpointsPerMember == 0 {
		o.MaxEndpointsPerMember = DefaultMaxEndpointsPerMember
	}
	if o.MaxSlicesPerNamespace == 0 {
		o.MaxSlicesPerNamespace = DefaultMaxSlicesPerNamespace
	}
	if o.ClusterDomain == "" {
		o.ClusterDomain = DefaultClusterDomain
	}
	o.DNSAddress = inClusterDomain(o.DNSAddress, o.ClusterDomain)
	if o.DeniedExportNamespaces == nil {
		o.DeniedExportNamespaces = export.DefaultDeniedNamespaces
	}
	if o.DeniedImportNamespaces == nil {
		o.DeniedImportNamespaces = o.DeniedExportNamespaces
	}
	if o.Logger == nil {
		log := ctrl.Log.WithName("mcs-controller")
		o.Logger = &log
	}
	return o
}

// inClusterDomain completes a DNS address whose host is a Service name without the cluster domain (it ends in
// ".svc") with domain, as an absolute name; any other address, or one that is not host:port (Validate reports
// it), stays as it is.
func inClusterDomain(address, domain string) string {
	host, port, err := net.SplitHostPort(address)
	if err != nil || !strings.HasSuffix(host, ".svc") {
		return address
	}
	return net.JoinHostPort(host+"."+strings.TrimSuffix(domain, ".")+".", port)
}

// Validate reports every setting of o that is out of range, each error naming the cmd/controller flag and the
// option field. A zero LeaseGrace, Workers, StaleLimit or limit is out of range too: Run gives those their defaults
// before it validates, and the flags state the defaults, so that a zero on the command line is a mistake. Local
// and Broker are not checked here, as a command line has them only once it has read the kubeconfigs.
func (o Options) Validate() error {
	var errs []error
	if o.ClusterID != "" {
		if err := clusterid.Validate(o.ClusterID); err != nil {
			errs = append(errs, fmt.Errorf("--cluster-id (Options.ClusterID): %w", err))
		}
	}
	if o.LeaseGrace < minLeaseGrace {
		errs = append(errs, fmt.Errorf("--lease-grace (Options.LeaseGrace): %v is shorter than %v", o.LeaseGrace, minLeaseGrace))
	}
	if o.Workers <= 0 {
		errs = append(errs, fmt.Errorf("--workers (Options.Workers): %d must be positive", o.Workers))
	}
	if o.StaleLimit <= 0 {
		errs = append(errs, fmt.Errorf("--stale-limit (Options.StaleLimit): %v must be positive", o.StaleLimit))
	}
	if o.MaxEndpointsPerService <= 0 || o.MaxEndpointsPerService > maxEndpointsPerService {
		errs = append(errs, fmt.Errorf("--max-endpoints-per-service (Options.MaxEndpointsPerService): %d is not within 1 to %d",
			o.MaxEndpointsPerService, maxEndpointsPerService))
	}
	if o.MaxEndpointsPerMember <= 0 {
		errs = append(errs, fmt.Errorf("--max-endpoints-per-member (Options.MaxEndpointsPerMember): %d must be positive", o.MaxEndpointsPerMember))
	}
	if o.MaxSlicesPerNamespace <= 0 {
		errs = append(errs, fmt.Errorf("--max-slices-per-namespace (Options.MaxSlicesPerNamespace): %d must be positive", o.MaxSlicesPerNamespace))
	}
	for _, ns := range o.DeniedExportNamespaces {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--denied-export-namespaces (Options.DeniedExportNamespaces): %q: %s", ns, strings.Join(msgs, "; ")))
		}
	}
	for _, ns := range o.DeniedImportNamespaces {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--denied-import-namespaces (Options.DeniedImportNamespaces): %q: %s", ns, strings.Join(msgs, "; ")))
		}
	}
	if msgs := validation.IsDNS1123Subdomain(strings.TrimSuffix(o.ClusterDomain, ".")); o.ClusterDomain != "" && len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--cluster-domain (Options.ClusterDomain): %q: %s", o.ClusterDomain, strings.Join(msgs, "; ")))
	}
	if o.DNSAddress != "" {
		if _, _, err := net.SplitHostPort(o.DNSAddress); err != nil {
			errs = append(errs, fmt.Errorf("--dns-address (Options.DNSAddress): %q is not host:port: %w", o.DNSAddress, err))
		}
	}
	return errors.Join(errs...)
}
