package cli

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"vksfleet.dev/fleet/mcs/names"
)

func TestBrokerContext(t *testing.T) {
	withBroker := []string{"broker", "cluster-a", "hub"}
	without := []string{"cluster-a", "hub"}
	cases := []struct {
		name                  string
		all                   []string
		current, flag, broker string
		want                  string
		wantErr               string
	}{
		{name: "the context named broker", all: withBroker, current: "cluster-a", want: "broker"},
		{name: "--context", all: withBroker, current: "cluster-a", flag: "hub", want: "hub"},
		{name: "--broker-context, the alias", all: withBroker, broker: "hub", want: "hub"},
		{name: "both, the same", all: withBroker, flag: "hub", broker: "hub", want: "hub"},
		{name: "both, differing", all: withBroker, flag: "hub", broker: "broker", wantErr: "alias"},
		{name: "the current context, as kubectl", all: without, current: "hub", want: "hub"},
		{name: "none at all", all: without, wantErr: "pass --context"},
		{name: "not in the kubeconfig", all: withBroker, flag: "nope", wantErr: "not in the kubeconfig"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := brokerContext(c.all, c.current, c.flag, c.broker)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got %q, %v; want an error containing %q", got, err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Errorf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestMemberIDs(t *testing.T) {
	ns := func(id, name string) corev1.Namespace {
		return corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{names.AnnotationClusterID: id}}}
	}
	namespaces := []corev1.Namespace{
		ns("cluster-b", names.BrokerNamespace("cluster-b")),
		ns("cluster-a", names.BrokerNamespace("cluster-a")),
		ns("cluster-x", names.BrokerNamespace("cluster-a")), // claims another's namespace
		{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}},
	}
	a, c, forged := lease("cluster-a", 0), lease("cluster-c", 0), lease("cluster-y", 0)
	forged.Namespace = names.BrokerNamespace("cluster-a")
	// cluster-d's Lease is gone, but its export record remains.
	record := fixture(t).Broker.Records[0].DeepCopy()
	record.Annotations[names.AnnotationClusterID], record.Namespace = "cluster-d", names.BrokerNamespace("cluster-d")
	objects := []metav1.Object{&a, &c, &forged, record}
	if got, want := memberIDs(namespaces, objects), []string{"cluster-a", "cluster-b", "cluster-c", "cluster-d"}; !slices.Equal(got, want) {
		t.Errorf("memberIDs = %v, want %v", got, want)
	}
}

func TestMatchContexts(t *testing.T) {
	ids := []string{"east", "north", "west"}
	refused := errors.New("connection refused")
	probes := []contextProbe{
		{context: "prod-west", clusterID: "west"},
		{context: "admin@east", clusterID: "east"},
		{context: "readonly@east", clusterID: "east"},
		{context: "kind-dev", clusterID: "dev"},
		{context: "no-id"},
		{context: "gone", err: refused},
	}
	text := func(ms []memberMatch) string {
		var out []string
		for _, m := range ms {
			s := m.clusterID + "@" + m.context
			if m.err != nil {
				s += "!" + m.err.Error()
			}
			out = append(out, s)
		}
		return strings.Join(out, " ")
	}
	cases := []struct {
		name      string
		probes    []contextProbe
		explicit  bool
		want      string
		wantNotes []string
		wantErr   string
	}{
		{name: "every context, matched by cluster id", probes: probes,
			want: "east@admin@east west@prod-west north@",
			wantNotes: []string{"context gone ignored: its cluster id could not be read", "context kind-dev ignored: cluster id \"dev\"",
				"context no-id ignored: no cluster id", "context readonly@east ignored: it reaches member east, read through context admin@east"}},
		{name: "--contexts keeps an unreachable context", probes: []contextProbe{probes[0], probes[5]}, explicit: true,
			want: "@gone!connection refused west@prod-west"},
		{name: "--contexts refuses a context that is no member", probes: []contextProbe{probes[0], probes[3]}, explicit: true,
			wantErr: "kind-dev (cluster id \"dev\")"},
		{name: "--contexts leaves the other members out", probes: []contextProbe{probes[1]}, explicit: true, want: "east@admin@east"},
		{name: "no context at all", want: "east@ north@ west@"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, notes, err := matchContexts(ids, c.probes, c.explicit)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if text(got) != c.want {
				t.Errorf("members %q, want %q", text(got), c.want)
			}
			if len(notes) != len(c.wantNotes) {
				t.Fatalf("notes %q, want %q", notes, c.wantNotes)
			}
			for i, n := range notes {
				if !strings.HasPrefix(n, c.wantNotes[i]) {
					t.Errorf("note %q, want it to start %q", n, c.wantNotes[i])
				}
			}
		})
	}
}

func TestParseDNSFlags(t *testing.T) {
	members := []memberMatch{{context: "prod-a", clusterID: "cluster-a"}, {clusterID: "cluster-b"}}
	got, err := parseDNSFlags([]string{"prod-a=127.0.0.1:5353", "cluster-b=127.0.0.1:5354"}, members)
	if err != nil || got["prod-a"] != "127.0.0.1:5353" || got["cluster-b"] != "127.0.0.1:5354" {
		t.Errorf("got %v, %v", got, err)
	}
	for _, bad := range []string{"prod-a", "=1.2.3.4:53", "cluster-z=1.2.3.4:53"} {
		if _, err := parseDNSFlags([]string{bad}, members); err == nil {
			t.Errorf("--dns %q accepted", bad)
		}
	}
	if dnsEnv("cluster-a") != "FLEET_DNS_CLUSTER_A" || dnsEnv("east.example") != "FLEET_DNS_EAST_EXAMPLE" {
		t.Errorf("dnsEnv = %q, %q", dnsEnv("cluster-a"), dnsEnv("east.example"))
	}
	t.Setenv(dnsEnv("cluster-a"), "127.0.0.1:1053")
	for _, c := range []struct {
		flags      map[string]string
		addr, from string
	}{
		{map[string]string{"cluster-a": "10.0.0.1:53"}, "10.0.0.1:53", "--dns"},
		{nil, "127.0.0.1:1053", "$FLEET_DNS_CLUSTER_A"},
	} {
		if addr, from := dnsAddress(members[0], c.flags); addr != c.addr || from != c.from {
			t.Errorf("dnsAddress with %v: %s from %s, want %s from %s", c.flags, addr, from, c.addr, c.from)
		}
	}
	if addr, _ := dnsAddress(members[1], nil); addr != "" {
		t.Errorf("dnsAddress of cluster-b: %q", addr)
	}
}

func TestExitCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, ExitHealthy},
		{ErrChecksFailed, ExitUnhealthy},
		{fmt.Errorf("ServiceExport demo/web is not valid (%w)", ErrUnhealthy), ExitUnhealthy},
		{errors.New("unknown flag: --bogus"), ExitCouldNotRun},
		{fmt.Errorf("reading the broker (context hub): %w", errRefused), ExitCouldNotRun},
	} {
		if got := ExitCode(c.err); got != c.want {
			t.Errorf("ExitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

var errRefused = errors.New("connection refused")
