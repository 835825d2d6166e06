package proc

import (
	"os"
	"path/filepath"
	"testing"
)

// testLogTail is how much of the processes' output a failed test shows: the end, where the failure is, and
// short enough that a CI summary of the run still shows the test's own lines before it.
const testLogTail = 10000

// TestLog creates a file in t's temporary directory for the output of the processes a test starts, and logs its
// last 10,000 bytes at the end of a test that failed. Create it before starting them: cleanups run last first,
// so the cleanup that stops them has run by then, and their last lines are in the file.
func TestLog(t testing.TB) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "processes.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer f.Close()
		if !t.Failed() {
			return
		}
		b, _ := os.ReadFile(f.Name())
		if len(b) > testLogTail {
			b = b[len(b)-testLogTail:]
		}
		t.Logf("last process logs:\n%s", b)
	})
	return f
}
