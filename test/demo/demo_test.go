package demo

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vksfleet.dev/fleet/test/clusterset"
	"vksfleet.dev/fleet/test/dataplane"
	"vksfleet.dev/fleet/test/fleet"
)

// logWriter sends the narration to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// TestStories is the fast variant of `make demo`: the same stories, traffic and expectations, with a 5 s lease
// grace.
func TestStories(t *testing.T) {
	if err := dataplane.CheckHost(); err != nil {
		t.Skip(err)
	}
	bin := t.TempDir()
	if err := fleet.Build(bin); err != nil {
		t.Fatal(err)
	}
	logf, err := os.CreateTemp(t.TempDir(), "fleet-*.log")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	f, err := fleet.Start(ctx, fleet.Options{
		ClusterSet: clusterset.Options{Members: clusterset.MemberNames(3), Nodes: 2},
		BinDir:     bin, LeaseGrace: 5 * time.Second, Log: logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Stop() })
	d := &Demo{Fleet: f, Serve: filepath.Join(bin, "serve"), Out: logWriter{t}, Timeout: time.Minute}
	if err := d.Run(ctx); err != nil {
		b, _ := os.ReadFile(logf.Name())
		if len(b) > 20000 {
			b = b[len(b)-20000:]
		}
		t.Fatalf("%v\nlast process logs:\n%s", err, b)
	}
}
