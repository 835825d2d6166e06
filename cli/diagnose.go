package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
)

func (o *options) diagnoseCommand() *cobra.Command {
	return o.readCommand(&cobra.Command{
		Use:   "diagnose [NAME | NAMESPACE/NAME]",
		Short: "Check the clusterset, and every exported service (or one), printing a PASS, FAIL or UNKNOWN line per check with a hint",
		Long: `diagnose checks that every member is reachable and has the CRDs, that its Corefile has the multicluster stanza and
its DNS serves clusterset.local, that its broker Lease is fresh and its clock agrees with the broker's, that it
holds no slices of a cluster that left; and per service: the ServiceExport is Valid, Ready and without Conflict,
the import exists wherever the namespace does, matches the broker, and the member's DNS resolves it (NXDOMAIN
where the namespace is absent, and for <clusterid>.<svc>.<ns>). On a member in the cluster-local DNS mode
(join --dns cluster-local), whose DNS need not serve clusterset.local, the Corefile and clusterset.local checks
give way to the cluster-local check: each import is reflected into cluster.local as <svc>-clusterset.
It exits 0 when no check fails, 1 when one does; UNKNOWN (something the plugin cannot see, such as a DNS
server it cannot reach: see --dns and --in-cluster) does not fail.`,
		Args: cobra.MaximumNArgs(1),
	}, true, func(ctx context.Context, ns string, args []string) (view, error) {
		name := ""
		if len(args) == 1 {
			name = args[0]
			if n, rest, ok := strings.Cut(name, "/"); ok {
				ns, name = n, rest
			}
		}
		s, err := o.snapshot(ctx, true, func(s *Snapshot) []types.NamespacedName { return s.services(ns, name) })
		if err != nil {
			return view{}, err
		}
		scope := s.services(ns, name)
		if name != "" && len(scope) == 0 {
			return view{}, fmt.Errorf("no member or broker knows a service %q%s", name, inNamespace(ns))
		}
		checks := Diagnose(s, scope)
		done := func() error {
			if o.output == outputTable || o.output == outputWide {
				if err := summary(o.streams.Out, checks); err != nil {
					return err
				}
			}
			if !Passed(checks) {
				return ErrChecksFailed
			}
			return nil
		}
		return view{table: diagnoseTable(checks), object: map[string]any{"passed": Passed(checks), "checks": checks}, done: done}, nil
	})
}

func inNamespace(ns string) string {
	if ns == "" {
		return ""
	}
	return " in namespace " + ns
}

// Result is a check's outcome.
type Result string

// Results. Unknown is for what the plugin cannot see (no Corefile ConfigMap, a DNS server it cannot reach, a
// member no context reaches): it is reported with a hint but does not fail diagnose.
const (
	Pass    Result = "PASS"
	Fail    Result = "FAIL"
	Unknown Result = "UNKNOWN"
)

// The checks' names, stable for scripts reading -o json.
const (
	CheckReachable        = "reachable"
	CheckCRDs             = "crds"
	CheckCorefile         = "corefile"
	CheckDNS              = "dns"
	CheckLease            = "lease"
	CheckClock            = "clock"
	CheckStaleSlices      = "stale-slices"
	CheckDataPlane        = "data-plane"
	CheckExportValid      = "export-valid"
	CheckExportReady      = "export-ready"
	CheckExportConflict   = "export-conflict"
	CheckImportPresent    = "import-present"
	CheckImportConsistent = "import-consistent"
	CheckClusterLocal     = "cluster-local"
)

// Check is one line of `kubectl mcs diagnose`.
type Check struct {
	Check string `json:"check"`
	// Cluster is the member's context (its cluster id when no context reaches it), or the broker's.
	Cluster string `json:"cluster"`
	// Service is namespace/name for the per-service checks.
	Service string `json:"service,omitempty"`
	Result  Result `json:"result"`
	Message string `json:"message"`
	// Hint says how to fix what did not pass.
	Hint string `json:"hint,omitempty"`
}

// Passed reports whether no check failed.
func Passed(checks []Check) bool {
	return !slices.ContainsFunc(checks, func(c Check) bool { return c.Result == Fail })
}

// Diagnose runs every check on the snapshot: the clusterset's (broker, then each member) and, for each service of
// scope, the export, import and DNS checks in each member.
func Diagnose(s *Snapshot, scope []types.NamespacedName) []Check {
	var out []Check
	out = append(out, brokerChecks(s)...)
	for i := range s.Members {
		out = append(out, memberChecks(s, &s.Members[i])...)
	}
	for _, svc := range scope {
		for i := range s.Members {
			out = append(out, serviceChecks(s, &s.Members[i], svc)...)
		}
	}
	return out
}

func memberChecks(s *Snapshot, m *Member) []Check {
	switch {
	case m.Context == "":
		return []Check{{Check: CheckReachable, Cluster: m.name(), Result: Unknown,
			Message: fmt.Sprintf("no kubeconfig context reaches member %s", m.ClusterID),
			Hint:    fmt.Sprintf("add a context for cluster %s to the kubeconfig, or pass --contexts naming the one that reaches it", m.ClusterID)}}
	case !m.reachable():
		return []Check{{Check: CheckReachable, Cluster: m.Context, Result: Fail, Message: m.Error,
			Hint: fmt.Sprintf("check the member's address and credentials: kubectl --context %s get --raw /version", m.Context)},
			dataPlaneCheck(s, m)}
	}
	dns := []Check{corefileCheck(m), zoneCheck(m)}
	if m.ClusterLocal {
		dns = []Check{clusterLocalModeCheck(m)}
	}
	return append(append([]Check{
		{Check: CheckReachable, Cluster: m.Context, Result: Pass, Message: "member reachable"},
		crdCheck(m.Context, m.MissingAPIs, "kubectl mcs join"),
	}, dns...),
		leaseCheck(s, m),
		clockCheck(s, m),
		staleSlicesCheck(s, m),
		dataPlaneCheck(s, m),
	)
}
