// Package deploy holds the kustomize bases a cluster is installed from, embedded, and renders them in process, so
// that `kubectl mcs` installs exactly what `kubectl apply -k build/deploy/...` would, without kustomize on the
// operator's machine.
package deploy

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// bases are the folders of build/deploy and its root kustomization (every member's parts).
//
//go:embed kustomization.yaml broker controller coredns crds dns-standalone member nodelocaldns policy replace-kube-dns
var bases embed.FS

// root is where the bases sit in the in-memory filesystem renders use.
const root = "/deploy"

// Render runs `kustomize build` on a folder of build/deploy ("." for the root, "broker", "member", ...).
func Render(dir string) ([]byte, error) { return build(path.Join(root, dir), "") }

// RenderOverlay runs `kustomize build` on an overlay: its kustomization.yaml names the bases as an operator's
// overlay beside a copy of build/deploy would, by relative path: "../deploy" for the root, "../deploy/member"...
func RenderOverlay(kustomization string) ([]byte, error) { return build(overlay, kustomization) }

// overlay is the folder of RenderOverlay's kustomization, beside root.
const overlay = "/overlay"

// build renders dir of an in-memory copy of the bases, where kustomization, unless empty, is the overlay's.
func build(dir, kustomization string) ([]byte, error) {
	mem := filesys.MakeFsInMemory()
	err := fs.WalkDir(bases, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := bases.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile(path.Join(root, p), b)
	})
	if err != nil {
		return nil, fmt.Errorf("deploy: copying the bases: %w", err)
	}
	if kustomization != "" {
		if err := mem.WriteFile(path.Join(overlay, "kustomization.yaml"), []byte(kustomization)); err != nil {
			return nil, fmt.Errorf("deploy: writing the overlay: %w", err)
		}
	}
	// The order kustomize's command gives by default: namespaces and CRDs before what lives in them.
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy
	resources, err := krusty.MakeKustomizer(opts).Run(mem, dir)
	if err != nil {
		return nil, fmt.Errorf("deploy: kustomize build %s: %w", strings.TrimPrefix(dir, "/"), err)
	}
	return resources.AsYaml()
}

// File returns one file of build/deploy by its path there, such as a Corefile block join appends.
func File(p string) ([]byte, error) { return bases.ReadFile(p) }
