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

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := mcsctl.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	err := cmd.ExecuteContext(ctx)
	switch {
	case err == nil:
	case errors.Is(err, mcsctl.ErrChecksFailed):
		os.Exit(1)
	default:
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
