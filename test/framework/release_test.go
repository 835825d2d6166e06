package framework

import (
	"context"
	"io"
	"strings"
	"testing"
)

// A clone without the commit (a shallow one, say) is told which commit is missing and how to fetch it.
func TestBuildReleaseMissingCommit(t *testing.T) {
	const commit = "0123456789abcdef0123456789abcdef01234567"
	_, err := BuildRelease(context.Background(), commit, io.Discard)
	if err == nil || !strings.Contains(err.Error(), commit) || !strings.Contains(err.Error(), "git fetch") {
		t.Fatalf("BuildRelease of a missing commit: %v; want an error naming it and how to fetch it", err)
	}
}
