package ctrlharness

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"vksfleet.dev/fleet/build/deploy"

	"vksfleet.dev/fleet/controller"
	"vksfleet.dev/fleet/test/env/proc"
)

// Every mcs-controller that a test, the fleet or a benchmark starts outside of pods starts here: in this process
// (InProcess), for tests that hand it client configurations of their own (impersonated, wrapped, or options no flag
// has), or as a process of the controller binary (StartProcess), for the fleet and for figures of its own CPU time
// and memory.

// Run is an mcs-controller run in this process: controller.Run in a goroutine of its own.
type Run struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done is closed
}

// InProcess starts controller.Run with opts in this process; it runs until Stop or Cancel, or until it fails.
func InProcess(opts controller.Options) *Run {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Run{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = controller.Run(ctx, opts)
	}()
	return r
}

// Cancel asks the controller to stop and returns at once; Done tells when it has.
func (r *Run) Cancel() { r.cancel() }

// Done is closed once controller.Run has returned: after Cancel, or on its own when it failed.
func (r *Run) Done() <-chan struct{} { return r.done }

// Err is what controller.Run returned; it is set once Done is closed.
func (r *Run) Err() error { return r.err }

// Stop stops the controller, waits for it to return, and returns what controller.Run returned, which may have
// happened long before, at start.
func (r *Run) Stop() error {
	r.cancel()
	<-r.done
	return r.err
}

// Flags are the command line of an mcs-controller process (cmd/controller). An empty field is left out, for the
// binary's default.
type Flags struct {
	// Deployed are a Deployment's arguments, which the fields below override (the last of a flag wins).
	Deployed []string
	// Kubeconfig reaches the member.
	Kubeconfig string
	// BrokerKubeconfig is the broker kubeconfig file; BrokerSecret (namespace/name) a member Secret that holds it.
	BrokerKubeconfig, BrokerSecret string
	// HealthProbeBindAddress and MetricsBindAddress are where the process serves its probes and metrics ("0":
	// not at all); DNSAddress is the member's DNS server, which an import waits for before it is Ready.
	HealthProbeBindAddress, MetricsBindAddress, DNSAddress string
	// LeaseGrace, Workers, QPS and Burst are --lease-grace, --workers, --qps and --burst.
	LeaseGrace time.Duration
	Workers    int
	QPS        float32
	Burst      int
	// More are further flags, after the fields: a test's own, such as --cluster-local-services.
	More []string
}

// args renders the flags in the order of the fields.
func (f Flags) args() []string {
	args := append([]string(nil), f.Deployed...)
	for _, s := range []struct{ flag, value string }{
		{"kubeconfig", f.Kubeconfig},
		{"broker-kubeconfig", f.BrokerKubeconfig},
		{"broker-secret", f.BrokerSecret},
		{"health-probe-bind-address", f.HealthProbeBindAddress},
		{"metrics-bind-address", f.MetricsBindAddress},
		{"dns-address", f.DNSAddress},
	} {
		if s.value != "" {
			args = append(args, "--"+s.flag+"="+s.value)
		}
	}
	if f.LeaseGrace > 0 {
		args = append(args, "--lease-grace="+f.LeaseGrace.String())
	}
	if f.Workers > 0 {
		args = append(args, "--workers="+strconv.Itoa(f.Workers))
	}
	if f.QPS > 0 {
		args = append(args, "--qps="+strconv.FormatFloat(float64(f.QPS), 'g', -1, 32))
	}
	if f.Burst > 0 {
		args = append(args, "--burst="+strconv.Itoa(f.Burst))
	}
	return append(args, f.More...)
}

// StartProcess starts the controller binary bin with flags as a child process (proc.Start), its output going to log
// with name as prefix, and with the GOMEMLIMIT the controller's Deployment gives it (its container's memory limit):
// a test that measures its memory measures what a member runs.
func StartProcess(log io.Writer, name, bin string, flags Flags) (*proc.Process, error) {
	limit, err := MemoryLimit()
	if err != nil {
		return nil, err
	}
	return proc.StartEnv(log, name, bin, []string{"GOMEMLIMIT=" + strconv.FormatInt(limit, 10)}, flags.args()...)
}

// MemoryLimit is the memory limit of the controller's container in build/deploy, in bytes.
func MemoryLimit() (int64, error) {
	b, err := deploy.File("controller/deployment.yaml")
	if err != nil {
		return 0, err
	}
	var d appsv1.Deployment
	if err := yaml.Unmarshal(b, &d); err != nil {
		return 0, fmt.Errorf("ctrlharness: build/deploy/controller/deployment.yaml: %w", err)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
			return q.Value(), nil
		}
	}
	return 0, fmt.Errorf("ctrlharness: build/deploy/controller/deployment.yaml sets no memory limit")
}
