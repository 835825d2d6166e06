package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// StatusRow is one member in `kubectl mcs status`.
type StatusRow struct {
	// Name is the member's context; "" when no context of the kubeconfig reaches the member.
	Name      string `json:"name"`
	Reachable bool   `json:"reachable"`
	// Error says why an unreachable member could not be read.
	Error      string `json:"error,omitempty"`
	ClusterID  string `json:"clusterID,omitempty"`
	ClusterSet string `json:"clusterSet,omitempty"`
	// Controller is the mcs-controller's version as its running pods report it, "" when the member does not say;
	// DNSVersion the same of our CoreDNS (Member.DNSVersion).
	Controller string `json:"controller,omitempty"`
	DNSVersion string `json:"dnsVersion,omitempty"`
	// LeaseAgeSeconds is how long ago the member's broker Lease was renewed (on the broker's clock); nil without
	// a Lease. Alive says whether that is within the Lease's grace.
	LeaseAgeSeconds *float64 `json:"leaseAgeSeconds,omitempty"`
	Alive           bool     `json:"alive"`
	// UnreachableFrom are the members whose data-plane probe finds this member's endpoints silent, as their
	// broker Leases say: its control plane may be alive while its pods cannot be reached from there.
	UnreachableFrom []string `json:"unreachableFrom,omitempty"`
	// Broker is the context of the broker holding the member's Lease; "" when it holds none.
	Broker string `json:"broker,omitempty"`
	// DNS says whether the member's DNS server answers clusterset.local: "yes", "no", or "unknown" when no
	// address is known; DNSAddress is where it was asked.
	DNS        string `json:"dns"`
	DNSAddress string `json:"dnsAddress,omitempty"`
}

// Status is one row per member, in the snapshot's order; unreachable members, and members no context reaches
// (with the Lease the broker holds), are rows too.
func Status(s *Snapshot) []StatusRow {
	rows := make([]StatusRow, 0, len(s.Members))
	for i := range s.Members {
		m := &s.Members[i]
		row := StatusRow{Name: m.Context, Reachable: m.reachable(), Error: m.Error, DNSAddress: m.DNS, ClusterID: m.ClusterID}
		if m.Context == "" {
			row.Error = "no kubeconfig context reaches this member: add one, or pass --contexts"
		}
		if l := s.lease(m.ClusterID); m.ClusterID != "" && l.found {
			age := l.age.Seconds()
			row.LeaseAgeSeconds, row.Alive, row.Broker = &age, l.alive(), s.Broker.Context
		}
		row.UnreachableFrom = s.unreachableFrom(m.ClusterID)
		row.DNS = dnsUnknown
		if row.Reachable {
			row.ClusterSet, row.Controller, row.DNSVersion, row.DNS = m.ClusterSet, m.ControllerVersion, m.DNSVersion, zoneServed(m)
		}
		rows = append(rows, row)
	}
	return rows
}

// DNS column values.
const (
	dnsYes     = "yes"
	dnsNo      = "no"
	dnsUnknown = "unknown"
)

// zoneServed says whether the member's DNS answered dns-version.clusterset.local with our schema version.
func zoneServed(m *Member) string {
	a, ok := m.DNSAnswers[versionQuery]
	switch {
	case !ok:
		return dnsUnknown
	case a.Rcode == "NOERROR" && len(a.Records) > 0:
		return dnsYes
	default:
		return dnsNo
	}
}

func statusTable(rows []StatusRow) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string"}, {Name: "Status", Type: "string"}, {Name: "Cluster-ID", Type: "string"},
		{Name: "ClusterSet", Type: "string"}, {Name: "Controller", Type: "string"}, {Name: "Lease-Age", Type: "string"},
		{Name: "Alive", Type: "string"}, {Name: "Unreachable-From", Type: "string"}, {Name: "Broker", Type: "string"},
		{Name: "DNS", Type: "string"}, {Name: "DNS-Version", Type: "string"},
		{Name: "DNS-Address", Type: "string", Priority: 1}, {Name: "Message", Type: "string", Priority: 1},
	}}
	for _, r := range rows {
		status, age, alive := "Reachable", "-", "-"
		switch {
		case r.Name == "":
			status = "No context"
		case !r.Reachable:
			status = "Unreachable"
		}
		if r.LeaseAgeSeconds != nil {
			age = duration.HumanDuration(time.Duration(*r.LeaseAgeSeconds * float64(time.Second)))
			alive = "no"
			if r.Alive {
				alive = "yes"
			}
		}
		controller := r.Controller
		if r.Reachable && controller == "" {
			controller = "unknown"
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{
			r.Name, status, dash(r.ClusterID), dash(r.ClusterSet), dash(controller), age, alive,
			dash(strings.Join(r.UnreachableFrom, ",")), dash(r.Broker), r.DNS, dash(r.DNSVersion),
			dash(r.DNSAddress), dash(r.Error),
		}})
	}
	return t
}

// notRunning is the version of a Deployment none of whose pods runs.
const notRunning = "none running"

// runningVersion is the version of a Deployment of ours as its running pods report it (podsVersion). Where the
// pods may not be listed, it is the tag of the Deployment's image, the version it runs or rolls out.
func runningVersion(ctx context.Context, c client.Client, dep *appsv1.Deployment) (string, error) {
	if len(dep.Spec.Template.Spec.Containers) == 0 {
		return "", nil
	}
	selector, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		return "", fmt.Errorf("the selector of Deployment %s/%s: %w", dep.Namespace, dep.Name, err)
	}
	var pods corev1.PodList
	err = c.List(ctx, &pods, client.InNamespace(dep.Namespace), client.MatchingLabelsSelector{Selector: selector})
	switch {
	case apierrors.IsForbidden(err):
		return tagOf(dep.Spec.Template.Spec.Containers[0].Image), nil
	case err != nil:
		return "", err
	}
	return podsVersion(pods.Items, dep.Spec.Template.Spec.Containers[0].Name), nil
}

// podsVersion is the tag of the image each running container named container of pods runs: the one the kubelet
// reports, or the pod's own where the runtime reports none by tag. Several, comma-separated, while a rollout is
// under way; notRunning when none runs.
func podsVersion(pods []corev1.Pod, container string) string {
	var tags []string
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, st := range p.Status.ContainerStatuses {
			if st.Name != container || st.State.Running == nil {
				continue
			}
			image := st.Image
			if strings.HasPrefix(image, "sha256:") {
				for _, c := range p.Spec.Containers {
					if c.Name == container {
						image = c.Image
					}
				}
			}
			if tag := tagOf(image); !slices.Contains(tags, tag) {
				tags = append(tags, tag)
			}
		}
	}
	if len(tags) == 0 {
		return notRunning
	}
	slices.Sort(tags)
	return strings.Join(tags, ",")
}

// tagOf is the tag of an image reference, or its digest; "latest" for neither, as the runtime reads it.
func tagOf(image string) string {
	if _, digest, ok := strings.Cut(image, "@"); ok {
		return digest
	}
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[i+1:]
	}
	return "latest"
}

func (o *options) statusCommand() *cobra.Command {
	return o.readCommand(&cobra.Command{
		Use:   "status",
		Short: "Every member: cluster id, clusterset, controller version, broker Lease, and whether its DNS serves clusterset.local, at which version",
		Args:  cobra.NoArgs,
	}, false, func(ctx context.Context, _ string, _ []string) (view, error) {
		s, err := o.snapshot(ctx, true, nil)
		if err != nil {
			return view{}, err
		}
		rows := Status(s)
		return view{table: statusTable(rows), object: map[string]any{"members": rows}}, nil
	})
}
