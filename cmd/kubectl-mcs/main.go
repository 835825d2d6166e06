// Command kubectl-mcs is a kubectl plugin (kubectl finds it on PATH as `kubectl mcs`) that shows and diagnoses
// a whole Multi-Cluster Services clusterset from one kubeconfig: status, services, diagnose, export, unexport.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"vksfleet.dev/fleet/mcsctl"
)

// main exits as mcsctl.ExitCode says, for scripts: 0 healthy, 1 unhealthy (a diagnose check failed), 2 could not
// run.
func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	cmd := mcsctl.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	err := cmd.ExecuteContext(ctx)
	// diagnose printed its failed checks already.
	if err != nil && !errors.Is(err, mcsctl.ErrChecksFailed) {
		fmt.Fprintln(os.Stderr, "error:", err)
	}
	stop()
	os.Exit(mcsctl.ExitCode(err))
}
