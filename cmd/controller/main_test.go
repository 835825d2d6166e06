package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"vksfleet.dev/fleet/controller"
)

func TestParseFlags(t *testing.T) {
	cases := []struct {
		args    []string
		wantErr string
		check   func(flags) bool
	}{
		{[]string{"--broker-kubeconfig=/b"}, "", func(f flags) bool {
			return f.brokerKubeconfig == "/b" && f.opts.LeaseGrace == controller.DefaultLeaseGrace && f.opts.Workers == controller.DefaultWorkers && f.qps == 200 && f.burst == 400 && !f.opts.ClusterLocalServices &&
				slices.Equal(f.opts.DeniedExportNamespaces, []string{"kube-system", "kube-public", "kube-node-lease", "default"}) &&
				f.opts.HealthProbeBindAddress == ":8081" && f.opts.MetricsBindAddress == ":8080"
		}},
		{[]string{"--broker-kubeconfig=/b", "--denied-export-namespaces= kube-system, shared-tools"}, "", func(f flags) bool {
			return slices.Equal(f.opts.DeniedExportNamespaces, []string{"kube-system", "shared-tools"})
		}},
		{[]string{"--broker-kubeconfig=/b", "--denied-export-namespaces="}, "", func(f flags) bool {
			return f.opts.DeniedExportNamespaces != nil && len(f.opts.DeniedExportNamespaces) == 0
		}},
		{[]string{"--broker-kubeconfig=/b", "--denied-export-namespaces=default,Not_A_Namespace"}, "--denied-export-namespaces", nil},
		{[]string{"--broker-secret=mcs-system/broker", "--cluster-id=east.prod", "--lease-grace=5s"}, "", func(f flags) bool {
			return f.brokerSecret == types.NamespacedName{Namespace: "mcs-system", Name: "broker"} && f.opts.ClusterID == "east.prod" &&
				f.opts.LeaseGrace == 5*time.Second
		}},
		{[]string{"--broker-kubeconfig=/b", "--cluster-local-services"}, "", func(f flags) bool { return f.opts.ClusterLocalServices }},
		{[]string{"--broker-kubeconfig=/b", "--cluster-local-services=maybe"}, "invalid boolean value", nil},
		{nil, "one of --broker-kubeconfig and --broker-secret is required", nil},
		{[]string{"--print-broker-namespace", "--cluster-id=east.prod"}, "", func(f flags) bool {
			return f.printBrokerNamespace && f.opts.ClusterID == "east.prod"
		}},
		{[]string{"--print-broker-namespace"}, "needs --cluster-id", nil},
		{[]string{"--broker-kubeconfig=/b", "--broker-secret=a/b"}, "exclude each other", nil},
		{[]string{"--broker-secret=broker"}, "is not namespace/name", nil},
		{[]string{"--broker-secret=a/b/c"}, "is not namespace/name", nil},
		{[]string{"--broker-kubeconfig=/b", "--cluster-id=Bad_ID"}, "--cluster-id", nil},
		{[]string{"--broker-kubeconfig=/b", "--lease-grace=100ms"}, "shorter than 1s", nil},
		{[]string{"--broker-kubeconfig=/b", "--qps=0"}, "must be positive", nil},
		{[]string{"--broker-kubeconfig=/b", "--workers=-1"}, "must be positive", nil},
		{[]string{"--broker-kubeconfig=/b", "--workers=0"}, "--workers", nil},
		{[]string{"--broker-kubeconfig=/b", "--lease-grace=0"}, "--lease-grace", nil},
		{[]string{"--broker-kubeconfig=/b", "--workers=4", "--leader-elect", "--leader-election-namespace=mcs-system",
			"--health-probe-bind-address=0", "--metrics-bind-address=:9090"}, "", func(f flags) bool {
			return f.opts.Workers == 4 && f.opts.LeaderElection && f.opts.LeaderElectionNamespace == "mcs-system" &&
				f.opts.HealthProbeBindAddress == "0" && f.opts.MetricsBindAddress == ":9090"
		}},
		{[]string{"--broker-secret=a/b", "--broker-token-renew-before=2m"}, "", func(f flags) bool { return f.renewBefore == 2*time.Minute }},
		{[]string{"--broker-kubeconfig=/b", "--broker-token-renew-before=-1s"}, "must not be negative", nil},
		{[]string{"--broker-kubeconfig=/b", "extra"}, "unexpected arguments", nil},
		{[]string{"--no-such-flag"}, "not defined", nil},
	}
	for _, c := range cases {
		f, err := parseFlags(c.args, io.Discard)
		switch {
		case c.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("parseFlags(%q) error = %v, want one containing %q", c.args, err, c.wantErr)
			}
		case err != nil:
			t.Errorf("parseFlags(%q) = %v", c.args, err)
		case !c.check(f):
			t.Errorf("parseFlags(%q) = %+v", c.args, f)
		}
	}
}
