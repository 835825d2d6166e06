// Package kubectlmcs tests the kubectl-mcs binary against a real local fleet: every diagnose check is caused to
// fail by its real fault and seen to pass once the fault is fixed.
package kubectlmcs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vksfleet.dev/fleet/cli"
	"vksfleet.dev/fleet/test/framework"
)

// leaseGrace is short so that a stopped controller's Lease expires within seconds, yet longer than a
// controller's restart.
const leaseGrace = 6 * time.Second

// propagation bounds how long a change takes to show in diagnose: a Lease expiring, a controller catching up.
const propagation = 45 * time.Second

var (
	fl         *framework.Fleet
	binDir     string
	kubeconfig string
)

func TestMain(m *testing.M) {
	framework.Main(m, framework.Suite{Setup: setup})
}

// setup starts the fleet and writes its kubeconfig for kubectl-mcs.
func setup(s *framework.Setup) error {
	var err error
	if binDir, err = framework.Build(); err != nil {
		return err
	}
	opts := framework.Options{BinDir: binDir, LeaseGrace: leaseGrace}
	if os.Getenv("KUBECTLMCS_LOG") != "" {
		opts.Log = os.Stderr
	}
	if fl, err = s.Fleet(opts); err != nil {
		return err
	}
	dir, err := s.TempDir()
	if err != nil {
		return err
	}
	kc, err := fl.Kubeconfig()
	if err != nil {
		return err
	}
	kubeconfig = filepath.Join(dir, "kubeconfig")
	return os.WriteFile(kubeconfig, kc, 0o600)
}

// result is one run of the plugin.
type result struct {
	stdout, stderr string
	code           int
}

// mcs runs kubectl-mcs with the fleet's kubeconfig and, as `source .fleet/env` would, each member's DNS address
// in FLEET_DNS_<MEMBER>.
func mcs(t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "kubectl-mcs"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	for _, m := range fl.Members {
		cmd.Env = append(cmd.Env, "FLEET_DNS_"+strings.ToUpper(strings.ReplaceAll(m.Name, "-", "_"))+"="+m.DNS)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("running kubectl-mcs %v: %v", args, err)
	}
	return r
}

// diagnosis is the -o json output of diagnose.
type diagnosis struct {
	Passed bool        `json:"passed"`
	Checks []cli.Check `json:"checks"`
	code   int
	stderr string
}

// diagnose runs `kubectl mcs diagnose -o json` with args and decodes it.
func diagnose(t *testing.T, args ...string) diagnosis {
	t.Helper()
	r := mcs(t, append([]string{"diagnose", "-o", "json"}, args...)...)
	var d diagnosis
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		t.Fatalf("diagnose %v: exit %d, stdout %q, stderr %q: %v", args, r.code, r.stdout, r.stderr, err)
	}
	d.code, d.stderr = r.code, r.stderr
	if want := map[bool]int{true: cli.ExitHealthy, false: cli.ExitUnhealthy}[d.Passed]; r.code != want {
		t.Fatalf("diagnose %v: passed=%v but exit code %d, want %d", args, d.Passed, r.code, want)
	}
	return d
}

// find returns the checks named check for cluster (and service, when not empty).
func (d diagnosis) find(check, cluster, service string) []cli.Check {
	var out []cli.Check
	for _, c := range d.Checks {
		if c.Check == check && c.Cluster == cluster && (service == "" || c.Service == service) {
			out = append(out, c)
		}
	}
	return out
}

// expect returns nil when the check for cluster and service has the result, else an error with what diagnose said.
func (d diagnosis) expect(check, cluster, service string, want cli.Result) error {
	found := d.find(check, cluster, service)
	if len(found) == 0 {
		return fmt.Errorf("no %s check for %s %s in %+v", check, cluster, service, d.Checks)
	}
	for _, c := range found {
		if c.Result != want {
			return fmt.Errorf("%s %s %s: %s (%s), want %s", check, cluster, service, c.Result, c.Message, want)
		}
	}
	return nil
}

// failures is an error listing the checks that did not pass, nil when all did.
func failures(d diagnosis) error {
	var errs []error
	for _, c := range d.Checks {
		if c.Result == cli.Fail {
			errs = append(errs, fmt.Errorf("%s %s %s: %s", c.Check, c.Cluster, c.Service, c.Message))
		}
	}
	return errors.Join(errs...)
}
