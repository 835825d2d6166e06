// Command kubectl-mcs is a kubectl plugin (kubectl finds it on PATH as `kubectl mcs`) that shows and diagnoses
// a whole Multi-Cluster Services clusterset from one kubeconfig: status, services, diagnose, export, unexport;
// and it installs one: broker init, join, unjoin.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"vksfleet.dev/fleet/cli"
)

// main exits as cli.ExitCode says, for scripts: 0 healthy, 1 unhealthy (a diagnose check failed), 2 could not
// run.
func main() {
	// Errors come back to the command, which prints them; controller-runtime's clients would otherwise warn, after
	// 30 s of a long join, that nobody set their logger.
	logf.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	cmd := cli.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	err := cmd.ExecuteContext(ctx)
	// diagnose printed its failed checks already.
	if err != nil && !errors.Is(err, cli.ErrChecksFailed) {
		fmt.Fprintln(os.Stderr, "error:", err)
	}
	stop()
	os.Exit(cli.ExitCode(err))
}
