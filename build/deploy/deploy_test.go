package deploy

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"testing"

	"vksfleet.dev/fleet/test/env/clusterset"
)

// TestRenderMatchesKustomize checks that the embedded bases render, in process, exactly what the kustomize
// binary renders from the repository's folders: the two install paths give the same objects.
func TestRenderMatchesKustomize(t *testing.T) {
	assets, err := clusterset.AssetsDir("")
	if err != nil {
		t.Skipf("no tools cache (make tools): %v", err)
	}
	for _, dir := range []string{".", "broker", "crds", "replace-kube-dns"} {
		t.Run(dir, func(t *testing.T) {
			got, err := Render(dir)
			if err != nil {
				t.Fatal(err)
			}
			want, err := exec.Command(filepath.Join(assets, "kustomize"), "build", dir).Output()
			if err != nil {
				t.Fatalf("kustomize build %s: %v", dir, err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("in-process render of %s differs from kustomize build (%d and %d bytes)", dir, len(got), len(want))
			}
		})
	}
}
