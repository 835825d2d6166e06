package demo

import (
	"context"
	"strings"
	"testing"
	"time"

	"vksfleet.dev/fleet/test/env/dataplane"
	"vksfleet.dev/fleet/test/framework"
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
	f, _ := framework.StartTest(t, 3, 2)
	ctx := context.Background()
	d := &Demo{Fleet: f, Out: logWriter{t}, Timeout: time.Minute}
	if err := d.Run(ctx); err != nil {
		t.Fatal(err)
	}
}
