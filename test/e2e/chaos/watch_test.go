package chaos

import (
	"bufio"
	"context"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/env/proc"
	"vksfleet.dev/fleet/test/framework"
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
func (w *watcher) imports(ctx context.Context, m *framework.Member) {
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
func (w *watcher) countWrites(ctx context.Context, m *framework.Member, first bool) {
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

// errValue and controllerValue find the error and the controller of a "Reconciler error" line as klog writes it.
var (
	errValue        = regexp.MustCompile(` err="((?:[^"\\]|\\.)*)"`)
	controllerValue = regexp.MustCompile(` controller="([^"]*)"`)
)

// scanLogs counts the "Reconciler error" lines of every log file of m's controller containers, on its nodes.
func (w *watcher) scanLogs(m *framework.Member) {
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

// countErrors counts a log file's "Reconciler error" lines by cause. The file is the kubelet's: each line starts
// with its time, stream and tag. klog writes an error of several lines as err=<, the lines indented, then " >"
// and the rest of the line's values.
func countErrors(path string) map[string]int {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	counts := map[string]int{}
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	next := func() (string, bool) {
		if !lines.Scan() {
			return "", false
		}
		// time stream tag text
		fields := strings.SplitN(lines.Text(), " ", 4)
		return fields[len(fields)-1], true
	}
	for {
		line, ok := next()
		if !ok {
			return counts
		}
		if !strings.Contains(line, `"Reconciler error"`) {
			continue
		}
		what, ctrl := "(no error)", "(no controller)"
		if head, _, multi := strings.Cut(line, " err=<"); multi {
			var text []string
			for {
				l, ok := next()
				if !ok {
					break
				}
				if rest, end := strings.CutPrefix(l, " >"); end {
					line = head + rest
					break
				}
				text = append(text, strings.TrimSpace(l))
			}
			what = cause(strings.Join(text, " "))
		} else if m := errValue.FindStringSubmatch(line); m != nil {
			what = cause(unquote(m[1]))
		}
		if m := controllerValue.FindStringSubmatch(line); m != nil {
			ctrl = m[1]
		}
		counts[ctrl+": "+what]++
	}
}

// unquote reads a value klog quoted, or returns it as it is.
func unquote(quoted string) string {
	if s, err := strconv.Unquote(`"` + quoted + `"`); err == nil {
		return s
	}
	return quoted
}

// uids and digits are what differs between two errors of one cause: object UIDs, and addresses, ports,
// versions, durations.
var (
	uids   = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	digits = regexp.MustCompile(`[0-9]+`)
)

// cause is an error's cause, as a reader would group it: its innermost part (after the last ": ") that is not
// empty or an object's UID alone, with UIDs written UID and numbers N.
func cause(s string) string {
	parts := strings.Split(s, ": ")
	c := parts[len(parts)-1]
	for i := len(parts) - 1; i >= 0; i-- {
		if p := strings.TrimSpace(parts[i]); p != "" && !uids.MatchString(p) || strings.Contains(p, " ") {
			c = p
			break
		}
	}
	return digits.ReplaceAllString(uids.ReplaceAllString(strings.TrimSpace(c), "UID"), "N")
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

func TestCountErrors(t *testing.T) {
	log := `2026-11-26T08:20:01.000000000Z stderr F E1126 08:20:01.000000       1 controller.go:474] "Reconciler error" err="updating chaos/web: Put \"https://10.254.0.1:1234/x\": dial tcp 10.254.0.1:1234: connect: connection refused" controller="serviceexport" namespace="chaos"
2026-11-26T08:20:02.000000000Z stderr F I1126 08:20:02.000000       1 other.go:1] "unrelated"
2026-11-26T08:20:03.000000000Z stderr F E1126 08:20:03.000000       1 controller.go:474] "Reconciler error" err=<
2026-11-26T08:20:03.000000000Z stderr F 	first line
2026-11-26T08:20:03.000000000Z stderr F 	writing slice: the object has been modified; please apply your changes to the latest version and try again
2026-11-26T08:20:03.000000000Z stderr F  > controller="serviceimport" namespace="chaos"
2026-11-26T08:20:04.000000000Z stderr F E1126 08:20:04.000000       1 controller.go:474] "Reconciler error" err="dial tcp 10.254.0.1:99: connect: connection refused" controller="serviceexport"
2026-11-26T08:20:05.000000000Z stderr F E1126 08:20:05.000000       1 controller.go:474] "Reconciler error" err="Precondition failed: UID in precondition: 0d1f2e3c-4b5a-6978-8a9b-0c1d2e3f4a5b, UID in object meta: " controller="serviceexport"
2026-11-26T08:20:06.000000000Z stderr F E1126 08:20:06.000000       1 controller.go:474] "Reconciler error" err="Post \"https://10.254.0.1:123/apis/x\": EOF" controller="serviceexport"
`
	path := filepath.Join(t.TempDir(), "0.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	got := countErrors(path)
	want := map[string]int{
		"serviceexport: connection refused":      2,
		"serviceexport: UID, UID in object meta": 1,
		"serviceexport: EOF":                     1,
		"serviceimport: the object has been modified; please apply your changes to the latest version and try again": 1,
	}
	if !maps.Equal(got, want) {
		t.Errorf("countErrors = %v, want %v", got, want)
	}
}
