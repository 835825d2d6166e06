package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"vksfleet.dev/fleet/test/env/poll"
	"vksfleet.dev/fleet/test/env/proc"
	"vksfleet.dev/fleet/test/framework/ctrlharness"
)

// waitIdle waits until every controller is idle at three polls in a row, so that a short gap between two bursts
// of work does not count as quiet.
func (bn *bench) waitIdle(ctx context.Context, timeout time.Duration) error {
	quiet := 0
	return poll.Until(ctx, 100*time.Millisecond, timeout, func() error {
		for _, c := range bn.ctrls {
			idle, _, err := c.Idle()
			if err != nil {
				return err
			}
			if !idle {
				quiet = 0
				return fmt.Errorf("%s's controller is busy", c.Name)
			}
		}
		if quiet++; quiet < 3 {
			return errors.New("idle only just now")
		}
		return nil
	})
}

// writes sums every controller's writes by "METHOD resource", Lease renewals excepted.
func (bn *bench) writes() (map[string]float64, error) {
	total := map[string]float64{}
	for _, c := range bn.ctrls {
		w, err := c.WritesByResource()
		if err != nil {
			return nil, err
		}
		for k, v := range w {
			total[k] += v
		}
	}
	return total, nil
}

// timings reads every controller's Timings, by member name.
func (bn *bench) timings() (map[string]ctrlharness.Timings, error) {
	all := map[string]ctrlharness.Timings{}
	for _, c := range bn.ctrls {
		t, err := c.Timings()
		if err != nil {
			return nil, err
		}
		all[c.Name] = t
	}
	return all, nil
}

func diff(after, before map[string]float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range after {
		if v -= before[k]; v != 0 {
			d[k] = v
		}
	}
	return d
}

func sum(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

// paced calls fn(0..n-1) from at most workers goroutines, starting one call every 1/rate seconds, or as fast as
// the workers go when rate is 0. It stops starting calls at the first error and returns it.
func paced(ctx context.Context, n int, rate float64, workers int, fn func(i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	slots := make(chan struct{}, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		if rate > 0 {
			// Scheduled from the start rather than from the previous call, so that lateness does not accumulate.
			if d := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
				}
			}
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := fn(i); err != nil {
				cancel(fmt.Errorf("item %d: %w", i, err))
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// cpuUse is the CPU time the machine, this process (the watches and the benchmark's writes) and each controller
// process used over a phase.
type cpuUse struct {
	wall                 time.Duration
	machineBusy, ownBusy float64            // cores' worth, averaged over wall
	controllers          map[string]float64 // CPU seconds, by member
}

// controllersBusy is the cores' worth all controllers used, averaged over the phase.
func (u cpuUse) controllersBusy() float64 { return sum(u.controllers) / u.wall.Seconds() }

type cpuMeter struct {
	start               time.Time
	machine, total, own float64
	ctrls               []*ctrlharness.Controller
	ctrlStart           map[string]float64
}

// startCPU starts measuring the machine, this process and ctrls.
func startCPU(ctrls []*ctrlharness.Controller) cpuMeter {
	m := cpuMeter{start: time.Now(), ctrls: ctrls, ctrlStart: map[string]float64{}}
	m.machine, m.total = machineCPU()
	m.own = ownCPU()
	for _, c := range ctrls {
		// A stopped controller has none: all of its next process's CPU time falls within the phase.
		if u, err := c.Usage(); err == nil {
			m.ctrlStart[c.Name] = u.CPUSeconds
		}
	}
	return m
}

func (m cpuMeter) stop() cpuUse {
	busy, total := machineCPU()
	u := cpuUse{wall: time.Since(m.start), controllers: map[string]float64{}}
	if total > m.total {
		u.machineBusy = (busy - m.machine) / (total - m.total) * float64(runtime.NumCPU())
	}
	u.ownBusy = (ownCPU() - m.own) / u.wall.Seconds()
	for _, c := range m.ctrls {
		if now, err := c.Usage(); err == nil {
			u.controllers[c.Name] = now.CPUSeconds - m.ctrlStart[c.Name]
		}
	}
	return u
}

// usage reads every controller's resident memory.
func (bn *bench) usage() (map[string]memory, error) {
	mem := map[string]memory{}
	for _, c := range bn.ctrls {
		u, err := c.Usage()
		if err != nil {
			return nil, err
		}
		mem[c.Name] = memory{RSS: u.RSS, Peak: u.PeakRSS}
	}
	return mem, nil
}

// machineCPU reads the busy and total jiffies of all cores from /proc/stat; zeros where it is unreadable.
func machineCPU() (busy, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}

// ownCPU is this process's CPU seconds; zero where /proc is unreadable.
func ownCPU() float64 {
	u, _ := proc.UsageOf(os.Getpid())
	return u.CPUSeconds
}

// percentile returns the nearest-rank p-th percentile.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(i, 0)]
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 0, 64)
}
