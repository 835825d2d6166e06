package ctrlharness

import (
	"slices"
	"testing"
	"time"
)

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags Flags
		want  []string
	}{
		{"empty fields keep the binary's defaults", Flags{}, nil},
		{"fields in order", Flags{
			Kubeconfig: "m", BrokerKubeconfig: "b", HealthProbeBindAddress: "0", MetricsBindAddress: "127.0.0.1:1",
			DNSAddress: "127.0.0.1:2", LeaseGrace: 5 * time.Second, Workers: 4, QPS: 7.5, Burst: 9,
		}, []string{
			"--kubeconfig=m", "--broker-kubeconfig=b", "--health-probe-bind-address=0", "--metrics-bind-address=127.0.0.1:1",
			"--dns-address=127.0.0.1:2", "--lease-grace=5s", "--workers=4", "--qps=7.5", "--burst=9",
		}},
		{"a Deployment's arguments first, so that the fields override them; a test's last", Flags{
			Deployed:     []string{"--broker-secret=mcs-system/broker-kubeconfig", "--health-probe-bind-address=:8081"},
			BrokerSecret: "ns/s", HealthProbeBindAddress: "127.0.0.1:3", More: []string{"--cluster-local-services"},
		}, []string{
			"--broker-secret=mcs-system/broker-kubeconfig", "--health-probe-bind-address=:8081",
			"--broker-secret=ns/s", "--health-probe-bind-address=127.0.0.1:3", "--cluster-local-services",
		}},
	} {
		if got := tc.flags.args(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestMemoryLimit: the controller's processes get the memory limit of its Deployment's container.
func TestMemoryLimit(t *testing.T) {
	if got, err := MemoryLimit(); err != nil || got != 512<<20 {
		t.Errorf("MemoryLimit() = %d, %v; want 512 MiB, as build/deploy/controller/deployment.yaml says", got, err)
	}
}
