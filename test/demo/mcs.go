package demo

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"vksfleet.dev/fleet/cli"
)

// kubectlMCS runs `kubectl mcs args...` (package cli, the plugin's own code, in this process) against every
// member and the broker, with each member's DNS server, as after `source .fleet/env`, and prints the command
// and its output. It fails when the command fails or when a check says FAIL or UNKNOWN: on our own fleet,
// installed from the manifests, every check can see what it checks.
func (d *Demo) kubectlMCS(ctx context.Context, args ...string) error {
	kc, err := d.Fleet.Kubeconfig()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "demo-kubectl-mcs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		return err
	}
	full := []string{"--kubeconfig", path}
	for _, m := range d.Fleet.Members {
		full = append(full, "--dns", m.Name+"="+m.DNS)
	}
	full = append(full, args...)
	d.say("$ kubectl mcs %s", strings.Join(args, " "))
	var out bytes.Buffer
	cmd := cli.NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out})
	cmd.SetArgs(full)
	err = cmd.ExecuteContext(ctx)
	d.say("%s", strings.TrimRight(out.String(), "\n"))
	if err != nil {
		return fmt.Errorf("kubectl mcs %s: %w", strings.Join(args, " "), err)
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 && (f[0] == string(cli.Fail) || f[0] == string(cli.Unknown)) {
			return fmt.Errorf("kubectl mcs %s: %s", strings.Join(args, " "), line)
		}
	}
	return nil
}
