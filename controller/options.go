package controller

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"

	"vksfleet.dev/fleet/controller/clusterid"
	"vksfleet.dev/fleet/controller/export"
)

// Defaults of the Options that Run gives a zero setting, and that cmd/controller's flags state.
const (
	// DefaultLeaseGrace is the default Options.LeaseGrace.
	DefaultLeaseGrace = 30 * time.Second
	// DefaultWorkers is the default Options.Workers.
	DefaultWorkers = 16
)

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
	if o.DeniedExportNamespaces == nil {
		o.DeniedExportNamespaces = export.DefaultDeniedNamespaces
	}
	if o.Logger == nil {
		log := ctrl.Log.WithName("mcs-controller")
		o.Logger = &log
	}
	return o
}

// Validate reports every setting of o that is out of range, each error naming the cmd/controller flag and the
// option field. A zero LeaseGrace or Workers is out of range too: Run gives those their defaults before it
// validates, and the flags state the defaults, so that a zero on the command line is a mistake. Local and Broker
// are not checked here, as a command line has them only once it has read the kubeconfigs.
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
	for _, ns := range o.DeniedExportNamespaces {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--denied-export-namespaces (Options.DeniedExportNamespaces): %q: %s", ns, strings.Join(msgs, "; ")))
		}
	}
	return errors.Join(errs...)
}
