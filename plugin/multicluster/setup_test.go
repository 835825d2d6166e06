package multicluster

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coredns/caddy"
	"k8s.io/client-go/rest"

	"vksfleet.dev/fleet/mcs/names"
)

func TestParse(t *testing.T) {
	tests := []struct {
		input string
		want  config
		err   string // substring of the error; "" for success
	}{
		{input: "multicluster clusterset.local", want: config{zone: "clusterset.local.", ttl: 5}},
		{input: "multicluster clusterset.local in-addr.arpa ip6.arpa",
			want: config{zone: "clusterset.local.", reverse: []string{"in-addr.arpa.", "ip6.arpa."}, ttl: 5}},
		{input: `multicluster clusterset.local {
			kubeconfig /tmp/kc ctx
			endpoint https://10.0.0.1:6443
			noendpoints
			ttl 0
			clusterid east.prod
		}`, want: config{zone: "clusterset.local.", kubeconfig: "/tmp/kc", context: "ctx", endpoint: "https://10.0.0.1:6443",
			noEndpoints: true, ttl: 0, clusterID: "east.prod"}},
		{input: "multicluster clusterset.local {\n kubeconfig /tmp/kc\n ttl 3600\n}",
			want: config{zone: "clusterset.local.", kubeconfig: "/tmp/kc", ttl: 3600}},
		{input: "multicluster clusterset.local {\n fallthrough\n}", want: config{zone: "clusterset.local.", ttl: 5}},
		{input: "multicluster clusterset.local {\n ttl 3601\n}", err: "Testfile:2 - Error during parsing: ttl must be"},
		{input: "multicluster clusterset.local {\n ttl -1\n}", err: "ttl must be"},
		{input: "multicluster clusterset.local {\n ttl five\n}", err: "ttl must be"},
		{input: "multicluster clusterset.local {\n ttl\n}", err: "Wrong argument count"},
		{input: "multicluster clusterset.local {\n kubeconfig\n}", err: "Wrong argument count"},
		{input: "multicluster clusterset.local {\n kubeconfig a b c\n}", err: "Wrong argument count"},
		{input: "multicluster clusterset.local {\n endpoint\n}", err: "Wrong argument count"},
		{input: "multicluster clusterset.local {\n noendpoints yes\n}", err: "Wrong argument count"},
		{input: "multicluster clusterset.local {\n clusterid\n}", err: "Wrong argument count"},
		{input: "multicluster clusterset.local {\n pods insecure\n}", err: `Testfile:2 - Error during parsing: unknown property "pods"`},
		{input: "multicluster in-addr.arpa", err: "a forward zone"},
		{input: "multicluster clusterset.local 10.0.0.0/8 fd00::/8",
			want: config{zone: "clusterset.local.", reverse: []string{"10.in-addr.arpa.", "d.f.ip6.arpa."}, ttl: 5}},
		{input: "multicluster clusterset.local db.in-addr.arpa", err: "Testfile:1 - Error during parsing: db.in-addr.arpa. is not the reverse zone of an address range"},
		{input: "multicluster a.local b.local", err: "one forward zone"},
		{input: "multicluster cluster_set.local", err: "RFC 1123 labels"},
		{input: "multicluster clusterset.local\nmulticluster clusterset.local", err: "only be used once"},
	}
	for _, tt := range tests {
		c := caddy.NewTestController("dns", tt.input)
		got, err := parse(c)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("parse(%q) error = %v, want it to contain %q", tt.input, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("parse(%q): %v", tt.input, err)
			continue
		}
		if got.zone != tt.want.zone || !slices.Equal(got.reverse, tt.want.reverse) || got.kubeconfig != tt.want.kubeconfig ||
			got.context != tt.want.context || got.endpoint != tt.want.endpoint || got.noEndpoints != tt.want.noEndpoints ||
			got.ttl != tt.want.ttl || got.clusterID != tt.want.clusterID {
			t.Errorf("parse(%q) = %+v, want %+v", tt.input, *got, tt.want)
		}
	}
}

// TestParseManagers checks the managers option: our controller's slices by default, the managers named, or every
// manager's for *; a malformed value stops the start with its line.
func TestParseManagers(t *testing.T) {
	const other = "endpointslice-controller.x-k8s.io"
	stanza := func(line string) string { return "multicluster clusterset.local {\n" + line + "\n}" }
	tests := []struct {
		input string
		want  []string
		err   string // substring of the error; "" for success
	}{
		{input: "multicluster clusterset.local", want: []string{names.ManagedBy}},
		{input: stanza("managers " + names.ManagedBy + " " + other), want: []string{names.ManagedBy, other}},
		{input: stanza("managers " + other), want: []string{other}},
		{input: stanza("managers *"), want: nil},
		{input: stanza("managers"), err: "Testfile:2 - Error during parsing: Wrong argument count"},
		{input: stanza("managers * " + other), err: "Testfile:2 - Error during parsing: managers: * serves every manager"},
		{input: stanza("managers " + other + " a/b"), err: `Testfile:2 - Error during parsing: managers: "a/b" is not a managed-by label value`},
		{input: stanza(`managers ""`), err: `managers: "" is not a managed-by label value: must not be empty`},
		{input: stanza("managers -x"), err: `managers: "-x" is not a managed-by label value`},
		{input: stanza("managers " + strings.Repeat("m", 64)), err: "must be no more than 63"},
	}
	for _, tt := range tests {
		cfg, err := parse(caddy.NewTestController("dns", tt.input))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("parse(%q) error = %v, want it to contain %q", tt.input, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("parse(%q): %v", tt.input, err)
			continue
		}
		if !slices.Equal(cfg.managers, tt.want) || (cfg.managers == nil) != (tt.want == nil) {
			t.Errorf("parse(%q) managers = %q, want %q", tt.input, cfg.managers, tt.want)
		}
	}
}

func TestParseFallthrough(t *testing.T) {
	c := caddy.NewTestController("dns", "multicluster clusterset.local {\n fallthrough example.org\n}")
	cfg, err := parse(c)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.fall.Through("a.example.org.") || cfg.fall.Through("a.clusterset.local.") {
		t.Errorf("fallthrough zones = %v", cfg.fall.Zones)
	}
}

func TestSetupFailsOnBadKubeconfig(t *testing.T) {
	c := caddy.NewTestController("dns", "multicluster clusterset.local {\n kubeconfig /nonexistent/kubeconfig\n}")
	if err := setup(c); err == nil || !strings.Contains(err.Error(), "kubeconfig") {
		t.Errorf("setup error = %v, want one naming the kubeconfig", err)
	}
}

func TestRestConfig(t *testing.T) {
	cfg := &config{endpoint: "http://127.0.0.1:8001"}
	rc, err := cfg.restConfig()
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "http://127.0.0.1:8001" || rc.QPS < 50 {
		t.Errorf("rest config = host %q qps %v", rc.Host, rc.QPS)
	}
}

// TestStartIsBounded checks that a server whose API server is away starts serving after the bound, as the
// kubernetes plugin does, rather than hold a start or a reload for ever.
func TestStartIsBounded(t *testing.T) {
	m, src, err := newWithSource(&config{zone: "clusterset.local.", ttl: 5}, &rest.Config{Host: "http://127.0.0.1:1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	start(src, 200*time.Millisecond)
	defer src.Stop()
	if d := time.Since(began); d < 200*time.Millisecond || d > 5*time.Second {
		t.Errorf("start returned after %s, want about 200ms", d)
	}
	if m.Ready() {
		t.Error("ready without an API server")
	}
}
