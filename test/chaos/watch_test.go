package chaos

import (
	"bufio"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"vksfleet.dev/fleet/test/dataplane"
	"vksfleet.dev/fleet/test/fleet"
	"vksfleet.dev/fleet/test/proc"
)

// watchEvery is how often the watcher looks at imports, the controllers' write counters and their logs.
const watchEvery = time.Second

// watcher looks at the clusterset while faults happen: whether a stable service's import is missing from a
// member, how many writes the controllers made, and their "Reconciler error" lines. A member whose API server
// does not answer is skipped for that round.
type watcher struct {
	mu sync.Mutex
	// lost lists each time a stable import was found missing: "member/name at time".
	lost []string
	// writes holds, per controller process (pod UID and restart count), the first and last count of its writes,
	// Lease renewals excepted, seen: a process that starts during the run starts from 0.
	writes map[string]*[2]float64
	// errors counts "Reconciler error" lines by cause, per log file (each container's log lives on its node
	// until the container is removed; the largest count seen is kept).
	errors map[string]map[string]int

	cancel context.CancelFunc
	done   chan struct{}
}

// watch starts the watcher; its stop ends it.
func (r *run) watch(ctx context.Context) *watcher {
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{writes: map[string]*[2]float64{}, errors: map[string]map[string]int{}, cancel: cancel, done: make(chan struct{})}
	first := true
	go func() {
		defer close(w.done)
		tick := time.NewTicker(watchEvery)
		defer tick.Stop()
		for {
			for _, m := range r.f.Members {
				w.imports(ctx, m)
				w.countWrites(ctx, m, first)
				w.scanLogs(m)
			}
			first = false
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// stop stops the watcher after one last round.
func (w *watcher) stop() {
	w.cancel()
	<-w.done
}

// imports records the stable imports missing from m.
func (w *watcher) imports(ctx context.Context, m *fleet.Member) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	got, err := imported(cctx, m)
	if err != nil {
		return
	}
	for _, name := range []string{"web-a", "web-b"} {
		if _, ok := got[name]; !ok {
			w.mu.Lock()
			w.lost = append(w.lost, m.Name+"/"+name+" at "+time.Now().Format("15:04:05.000"))
			w.mu.Unlock()
		}
	}
}

// countWrites reads the writes counter of m's controller processes; at the first round, each one's count is
// its starting point.
func (w *watcher) countWrites(ctx context.Context, m *fleet.Member, first bool) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	pods, err := m.ControllerPods(cctx)
	if err != nil {
		return
	}
	for _, p := range pods {
		a, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil {
			continue
		}
		families, err := proc.Scrape("http://" + netip.AddrPortFrom(a, 8080).String() + "/metrics")
		if err != nil {
			continue
		}
		n := proc.Sum(families, "mcs_controller_api_writes_total", nil) - proc.Sum(families, "mcs_controller_api_writes_total", map[string]string{"resource": "leases"})
		key := string(p.UID) + "/" + strconv.Itoa(int(p.Status.ContainerStatuses[0].RestartCount))
		w.mu.Lock()
		if c := w.writes[key]; c != nil {
			c[1] = max(c[1], n)
		} else if first {
			w.writes[key] = &[2]float64{n, n}
		} else {
			w.writes[key] = &[2]float64{0, n}
		}
		w.mu.Unlock()
	}
}

// totalWrites adds up the writes seen.
func (w *watcher) totalWrites() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var sum float64
	for _, c := range w.writes {
		sum += c[1] - c[0]
	}
	return sum
}

// reconcilerError matches a controller's "Reconciler error" line as klog writes it; errValue and controllerValue
// find its error and its controller.
var (
	reconcilerError = regexp.MustCompile(`"Reconciler error"`)
	errValue        = regexp.MustCompile(` err="((?:[^"\\]|\\.)*)"`)
	controllerValue = regexp.MustCompile(` controller="([^"]*)"`)
)

// scanLogs counts the "Reconciler error" lines of every log file of m's controller containers, on its nodes.
func (w *watcher) scanLogs(m *fleet.Member) {
	for _, n := range m.Nodes {
		files, _ := filepath.Glob(filepath.Join(dataplane.NodeDataDir(n.Name), "pods", "mcs-system_*", "*", "*.log"))
		for _, path := range files {
			counts := countErrors(path)
			w.mu.Lock()
			old := w.errors[path]
			if old == nil {
				old = map[string]int{}
				w.errors[path] = old
			}
			for cause, c := range counts {
				old[cause] = max(old[cause], c)
			}
			w.mu.Unlock()
		}
	}
}

// countErrors counts a log file's "Reconciler error" lines by cause.
func countErrors(path string) map[string]int {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	counts := map[string]int{}
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	for lines.Scan() {
		line := lines.Text()
		if !reconcilerError.MatchString(line) {
			continue
		}
		what, ctrl := "(no error)", "(no controller)"
		if m := errValue.FindStringSubmatch(line); m != nil {
			what = cause(m[1])
		}
		if m := controllerValue.FindStringSubmatch(line); m != nil {
			ctrl = m[1]
		}
		counts[ctrl+": "+what]++
	}
	return counts
}

// digits are what differs between two errors of one cause: addresses, ports, versions, durations.
var digits = regexp.MustCompile(`[0-9]+`)

// cause is an error's cause, as a reader would group it: its innermost part (after the last ": "), with numbers
// written N.
func cause(quoted string) string {
	s, err := strconv.Unquote(`"` + quoted + `"`)
	if err != nil {
		s = quoted
	}
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return digits.ReplaceAllString(s, "N")
}

// errorsByCause adds up the "Reconciler error" lines of every log by cause.
func (w *watcher) errorsByCause() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	total := map[string]int{}
	for _, counts := range w.errors {
		for c, n := range counts {
			total[c] += n
		}
	}
	return total
}
