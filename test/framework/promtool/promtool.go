// Package promtool runs Prometheus' promtool, which `make tools` installs from Debian's prometheus package, for
// the tests that check metrics and alert rules the way Prometheus itself reads them.
package promtool

import (
	"bytes"
	"fmt"
	"os/exec"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// Run runs promtool with args and stdin and fails t with its output when it fails.
func Run(t testing.TB, stdin []byte, args ...string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is missing (make tools installs Debian's prometheus package): %v", err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool %v: %v\n%s", args, err, out)
	}
}

// CheckMetrics runs `promtool check metrics` over the text exposition of what g gathers, as /metrics serves it.
func CheckMetrics(t testing.TB, g prometheus.Gatherer) {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	enc := expfmt.NewEncoder(&text, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			t.Fatal(fmt.Errorf("encoding %s: %w", f.GetName(), err))
		}
	}
	Run(t, text.Bytes(), "check", "metrics")
}
