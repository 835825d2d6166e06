// Command scalebench simulates a clusterset of many members on one real broker (sim.go says how a member is
// simulated), and measures what each member costs the broker and how long joins, exports and a member's loss
// take to reach every member: `make bench-scale` writes test/bench/results/scale-members.md. A run of 10 members
// is part of `make test` (scale_test.go), so that the broker's layout stays constant per member.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"vksfleet.dev/fleet/cli/install"
	"vksfleet.dev/fleet/mcs/mcsversion"
	"vksfleet.dev/fleet/mcs/memberlease"
	"vksfleet.dev/fleet/mcs/names"
	"vksfleet.dev/fleet/test/bench/chart"
	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/poll"
)

func main() {
	out := flag.String("out", "test/bench/results/scale-members.md", "where to write the results")
	grid := flag.String("points", "10x1000,50x1000,100x1000,250x1000,10x10000",
		"the points, members x services the clusterset exports (spread over its members), comma-separated")
	idle := flag.Duration("idle", 30*time.Second, "how long the broker's idle cost is measured")
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	var points []point
	for _, pt := range strings.Split(*grid, ",") {
		cfg := config{idle: *idle, exports: 20, grace: memberlease.DefaultGrace}
		m, sv, _ := strings.Cut(pt, "x")
		var err1, err2 error
		cfg.members, err1 = strconv.Atoi(m)
		cfg.services, err2 = strconv.Atoi(sv)
		if err1 != nil || err2 != nil || cfg.members < 2 || cfg.services < 1 {
			log.Fatalf("-points %q: want MEMBERSxSERVICES, 2 members or more", pt)
		}
		log.Printf("%d members, %d services", cfg.members, cfg.services)
		p, err := run(context.Background(), cfg, os.Stderr)
		if err != nil {
			log.Fatalf("%d members: %v", cfg.members, err)
		}
		log.Print(p.row())
		points = append(points, p)
	}
	if err := os.WriteFile(*out, []byte(report(points)), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := chart.WriteFile(strings.TrimSuffix(*out, ".md")+".svg", perMember(points)); err != nil {
		log.Fatal(err)
	}
}

// perMember charts what each member costs the broker, and what a join and an export take, against the members.
func perMember(points []point) chart.Lines {
	var x []float64
	series := []chart.Series{{Name: "broker watches per member", Color: 0}, {Name: "broker idle CPU ms/s per member", Color: 1},
		{Name: "join complete everywhere, s", Color: 2}, {Name: "export → last member p99, 100 ms", Color: 3}}
	for _, p := range points {
		x = append(x, float64(p.members))
		for i, y := range []float64{2 * p.watchesPerMember, p.idleCPUPerMember, p.joinNext.Seconds(), p.p99.Seconds() * 10} {
			series[i].Y = append(series[i].Y, y)
		}
	}
	for i := range series {
		series[i].X = x
	}
	return chart.Lines{Title: "The broker's cost per member, and propagation, by members (simulated)", X: "members", Y: "per member, or time", Series: series}
}

// config is one point of the run.
type config struct {
	members, services, exports int
	idle, grace                time.Duration
}

// point is what one point measured.
type point struct {
	config
	joinAll            time.Duration // the N members' joins, in turn
	watchesPerMember   float64       // the watches the broker serves beyond its own, / N, with one replica each
	idleCPUPerMember   float64       // broker CPU ms per s per member, idle
	idleRequestsPerSec float64
	peakRSS            int64
	storeBytes         float64
	joinNext           time.Duration // member N+1: join, until every other member has its record and it has theirs
	joinRequests       float64       // the broker's requests during that join, beyond the idle rate
	exportP50, p99     time.Duration // a new export until the last member's cache has it
	lossDecided        time.Duration // a member's last renewal until every other member judges it lost
}

// run runs one point on a broker of its own.
func run(ctx context.Context, cfg config, logw io.Writer) (point, error) {
	p := point{config: cfg}
	cs, err := clusterset.Start(ctx, clusterset.Options{BrokerOnly: true})
	if err != nil {
		return p, err
	}
	defer func() { _ = cs.Stop() }()
	info, err := install.BrokerInit(ctx, cs.Broker.Config, install.InitOptions{ClusterSet: "scale", TokenExpiration: time.Hour}, io.Discard)
	if err != nil {
		return p, err
	}
	legacy, err := mcsversion.NewScheme(mcsv1beta1.SchemeGroupVersion)
	if err != nil {
		return p, err
	}
	s := &sim{cfg: cs.Broker.Config, info: info, grace: cfg.grace, legacy: legacy}
	if s.pid, err = apiServerPid(cs.Broker.Config.Host); err != nil {
		return p, err
	}
	defer func() {
		for _, m := range s.members {
			m.stop()
		}
	}()
	// The broker's own watches (its controller manager's, its API server's own) are not the members'.
	base, err := s.usage(ctx)
	if err != nil {
		return p, err
	}
	start := time.Now()
	for i := range cfg.members {
		if _, err := s.join(ctx, fmt.Sprintf("member-%04d", i)); err != nil {
			return p, err
		}
	}
	p.joinAll = time.Since(start)
	fmt.Fprintf(logw, "%d members joined in %s\n", cfg.members, p.joinAll.Round(time.Millisecond))
	if err := s.publishAll(ctx, cfg.services); err != nil {
		return p, err
	}
	if err := poll.Until(ctx, look, 5*time.Minute, func() error { return s.complete(cfg.services) }); err != nil {
		return p, fmt.Errorf("every member has every record: %w", err)
	}
	before, err := s.usage(ctx)
	if err != nil {
		return p, err
	}
	time.Sleep(cfg.idle) // a measurement of the idle broker over a fixed window, not a wait for an event
	after, err := s.usage(ctx)
	if err != nil {
		return p, err
	}
	secs := after.at.Sub(before.at).Seconds()
	p.watchesPerMember = (after.watchers - base.watchers) / float64(cfg.members)
	p.idleCPUPerMember = (after.cpu - before.cpu) / secs / float64(cfg.members) * 1000
	p.idleRequestsPerSec = (after.requests - before.requests) / secs

	if p.exportP50, p.p99, err = s.exportLatency(ctx, cfg.exports); err != nil {
		return p, err
	}
	if p.joinNext, p.joinRequests, err = s.joinNext(ctx, fmt.Sprintf("member-%04d", cfg.members), cfg.services, p.idleRequestsPerSec); err != nil {
		return p, err
	}
	if p.lossDecided, err = s.lose(ctx, s.members[1]); err != nil {
		return p, err
	}
	end, err := s.usage(ctx)
	if err != nil {
		return p, err
	}
	p.peakRSS, p.storeBytes = end.peakRSS, end.storeBytes
	return p, nil
}

// publishAll exports services services, service i from member i mod N, eight at a time.
func (s *sim) publishAll(ctx context.Context, services int) error {
	work := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				m := s.members[i%len(s.members)]
				if err := m.publish(ctx, "scale", serviceName(i), endpoint(i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for i := range services {
		select {
		case work <- i:
		case err := <-errs:
			close(work)
			wg.Wait()
			return err
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// complete fails unless every member's cache has every other member's records of the first services services.
func (s *sim) complete(services int) error {
	for _, m := range s.members {
		m.mu.Lock()
		n := len(m.seen)
		m.mu.Unlock()
		// Every other member's records and sentinels.
		want := services - ownServices(services, len(s.members), s.index(m)) + len(s.members) - 1
		if n < want {
			return fmt.Errorf("%s has %d of the others' %d records", m.id, n, want)
		}
	}
	return nil
}

// ownServices is how many of services services member i of n exports.
func ownServices(services, n, i int) int {
	own := services / n
	if i < services%n {
		own++
	}
	return own
}

func (s *sim) index(m *member) int { return slices.Index(s.members, m) }

// exportLatency exports n new services from the first member, one at a time, and returns the median and 99th
// percentile of the time until the last other member's cache has each.
func (s *sim) exportLatency(ctx context.Context, n int) (time.Duration, time.Duration, error) {
	var took []time.Duration
	a := s.members[0]
	for i := range n {
		name := fmt.Sprintf("latency-%03d", i)
		start := time.Now()
		if err := a.publish(ctx, "scale", name, endpoint(100000+i)); err != nil {
			return 0, 0, err
		}
		record := names.RecordName("scale", name)
		var last time.Time
		err := poll.Until(ctx, look, time.Minute, func() error {
			last = time.Time{}
			for _, m := range s.members[1:] {
				at, ok := m.seenAt(a.id, record)
				if !ok {
					return fmt.Errorf("not in %s's cache", m.id)
				}
				last = maxTime(last, at)
			}
			return nil
		})
		if err != nil {
			return 0, 0, fmt.Errorf("export %s everywhere: %w", name, err)
		}
		took = append(took, last.Sub(start))
	}
	slices.Sort(took)
	return took[len(took)/2], took[int(math.Ceil(0.99*float64(len(took))))-1], nil
}

// joinNext joins member id and has it export one service: the time until every other member has that record and
// the new member has every record, and the broker's requests meanwhile beyond the idle rate.
func (s *sim) joinNext(ctx context.Context, id string, services int, idleRate float64) (time.Duration, float64, error) {
	before, err := s.usage(ctx)
	if err != nil {
		return 0, 0, err
	}
	m, err := s.join(ctx, id)
	if err != nil {
		return 0, 0, err
	}
	if err := m.publish(ctx, "scale", "joined", endpoint(200000)); err != nil {
		return 0, 0, err
	}
	record := names.RecordName("scale", "joined")
	err = poll.Until(ctx, look, time.Minute, func() error {
		for _, o := range s.members {
			if o == m {
				continue
			}
			if _, ok := o.seenAt(id, record); !ok {
				return fmt.Errorf("its record not in %s's cache", o.id)
			}
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if len(m.seen) < services {
			return fmt.Errorf("it has %d of %d records", len(m.seen), services)
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("%s joined everywhere: %w", id, err)
	}
	after, err := s.usage(ctx)
	if err != nil {
		return 0, 0, err
	}
	took := after.at.Sub(before.at)
	return took, after.requests - before.requests - idleRate*took.Seconds(), nil
}

// lose stops m's renewals and returns the time from its last renewal until every other member judges it lost.
func (s *sim) lose(ctx context.Context, m *member) (time.Duration, error) {
	m.renew <- false
	err := poll.Until(ctx, look, 3*s.grace, func() error {
		for _, o := range s.members {
			if o != m && o.alive(m.id) {
				return fmt.Errorf("%s judges it alive", o.id)
			}
		}
		return nil
	})
	if err != nil {
		err = fmt.Errorf("%s judged lost everywhere: %w", m.id, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return time.Since(m.renewed), err
}

// look is how often the run looks for what it waits for; what it measures is stamped as the members' caches see
// it, not when the run looks.
const look = 20 * time.Millisecond

func serviceName(i int) string { return fmt.Sprintf("svc-%05d", i) }

// endpoint is a distinct documentation address per service.
func endpoint(i int) string { return fmt.Sprintf("10.%d.%d.%d", 100+i/65536, i/256%256, i%256) }

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// row is the point as a table row.
func (p point) row() string {
	return fmt.Sprintf("| %d | %d | %.1f | %.2f | %.1f | %.0f | %.1f | %s | %.0f | %s | %s | %s | %s |", p.members, p.services,
		2*p.watchesPerMember, p.idleCPUPerMember, p.idleRequestsPerSec/float64(p.members), float64(p.peakRSS)/(1<<20), p.storeBytes/(1<<20),
		ms(p.joinNext), p.joinRequests, ms(p.exportP50), ms(p.p99), ms(p.lossDecided), ms(p.joinAll))
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + " ms" }

// report is the results file.
func report(points []point) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Scale: the broker's cost per member, and propagation, by simulation\n\n")
	fmt.Fprintf(&b, "Generated by `make bench-scale` (test/bench/scalebench) on %s. One real broker (kube-apiserver and etcd, "+
		"with this release's `kubectl mcs broker init`) and N simulated members, each joined as `kubectl mcs join` does, "+
		"with its own credential, running the controller's broker-facing code: its records cache and its own namespace's "+
		"cache of the previous layout, its MemberLease and Lease renewed every grace/3 (grace %s), the member directory "+
		"read every 5 s, its exports published in both layouts, the others' Leases judged every second. The members run in "+
		"the benchmark's process, on the same 2 cores as the broker, with one replica each: watches are doubled in the "+
		"table for the Deployment's two. A member's own cluster is not simulated: none of it reaches the broker.\n\n",
		time.Now().UTC().Format("2006-01-02"), points[0].grace)
	b.WriteString("![the broker's cost per member, and propagation, by members](scale-members.svg)\n\n")
	b.WriteString("| members | services | broker watches per member (2 replicas) | broker idle CPU ms/s per member | broker requests/s per member, idle | broker peak RSS MiB | etcd MiB | member N+1: joined and imported everywhere | broker requests for that join, beyond idle | export → last member p50 | p99 | a member's loss decided everywhere | N joins in turn |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range points {
		b.WriteString(p.row() + "\n")
	}
	return b.String()
}
