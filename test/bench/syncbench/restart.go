package main

import (
	"context"
	"fmt"
	"log"
	"time"
)

// restart waits until the clusterset is quiet, stops every controller, starts them all again and measures until
// each has reconciled every service and is idle, recording the writes they made meanwhile.
func (bn *bench) restart(ctx context.Context, res *results) error {
	if err := bn.waitIdle(ctx, 10*time.Minute); err != nil {
		return err
	}
	services := float64(bn.cfg.services + 1) // and the readiness service
	log.Print("restarting every controller")
	reconciles := map[string]float64{}
	for _, c := range bn.ctrls {
		if err := c.Stop(); err != nil {
			return fmt.Errorf("%s controller: %w", c.Name, err)
		}
		_, n, err := c.Idle()
		if err != nil {
			return err
		}
		reconciles[c.Name] = n
	}
	// Read after the stops, which keep each process's last totals: the restarted processes' writes are the rest.
	before, err := bn.writes()
	if err != nil {
		return err
	}
	cpu := startCPU(bn.ctrls)
	start := time.Now()
	if err := bn.startControllers(); err != nil {
		return err
	}
	res.restartEach, res.restartReconciles = map[string]time.Duration{}, map[string]float64{}
	// The convergence time is read at this resolution; each poll reads every controller's metrics endpoint.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Minute)
	for len(res.restartEach) < len(bn.ctrls) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("controllers not converged after 20 minutes: %v converged", res.restartEach)
		case <-tick.C:
		}
		for _, c := range bn.ctrls {
			if _, done := res.restartEach[c.Name]; done {
				continue
			}
			idle, n, err := c.Idle()
			if err != nil {
				return err
			}
			// Every service is a key of every controller, since each member imports them all: idle after that
			// many reconciles means the startup queue has drained.
			if idle && n-reconciles[c.Name] >= services {
				res.restartEach[c.Name] = time.Since(start)
				res.restartReconciles[c.Name] = n - reconciles[c.Name]
			}
		}
	}
	res.restartTook = time.Since(start)
	res.restartCPU = cpu.stop()
	if res.restartMemory, err = bn.usage(); err != nil {
		return err
	}
	after, err := bn.writes()
	if err != nil {
		return err
	}
	res.restartWrites = diff(after, before)
	log.Printf("restart: converged in %s, %.0f writes", res.restartTook, sum(res.restartWrites))
	return nil
}
