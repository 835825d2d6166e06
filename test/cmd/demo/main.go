// Command demo brings up a local fleet (3 members + broker, each member with an mcs-controller, our CoreDNS and
// two nodes that run pods), walks the two user stories of VKS Fleet with client loops sending requests from
// cluster-a throughout, prints what a user would see and the traffic phase by phase, and exits non-zero if any
// expectation fails. `make demo` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"vksfleet.dev/fleet/test/demo"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/framework"
)

func main() {
	grace := flag.Duration("lease-grace", 10*time.Second, "the controllers' --lease-grace")
	timeout := flag.Duration("timeout", time.Minute, "how long each expectation may take to hold")
	logPath := flag.String("log", ".fleet/demo.log", "where the fleet's processes log")
	flag.Parse()
	if err := run(*logPath, *grace, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(logPath string, grace, timeout time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(".fleet", 0o755); err != nil {
		return err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Printf("Starting a local fleet: cluster-a, cluster-b, cluster-c + broker, 2 nodes each (logs: %s)\n", logPath)
	start := time.Now()
	f, err := framework.Start(ctx, framework.Options{
		ClusterSet: clusterset.Options{Members: clusterset.MemberNames(3), Nodes: 2},
		LeaseGrace: grace, Log: logf,
	})
	if err != nil {
		return err
	}
	defer f.Stop()
	fmt.Printf("Fleet up in %s.\n", time.Since(start).Round(100*time.Millisecond))
	d := &demo.Demo{Fleet: f, Out: os.Stdout, Timeout: timeout}
	if err := d.Run(ctx); err != nil {
		return fmt.Errorf("%w (process logs: %s)", err, logPath)
	}
	return nil
}
