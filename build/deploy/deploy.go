// Package deploy holds the kustomize bases a cluster is installed from, embedded, and renders them in process, so
// that `kubectl mcs` installs what `kubectl apply -k build/deploy/...` would, without kustomize on the operator's
// machine, with one difference: a binary built at a version renders our images at its own (ImageTag).
package deploy

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"vksfleet.dev/fleet/mcs/buildinfo"
)

// bases are the folders of build/deploy and its root kustomization (a member's parts in the default DNS mode).
//
//go:embed kustomization.yaml broker controller coredns crds dns-standalone member nodelocaldns policy replace replace-kube-dns
var bases embed.FS

// root is where the bases sit in the in-memory filesystem renders use.
const root = "/deploy"

// Render runs `kustomize build` on a folder of build/deploy ("." for the root, "broker", "member", ...), our images
// at ImageTag.
func Render(dir string) ([]byte, error) {
	return build(path.Join(root, dir), "", buildinfo.Read().ImageTag)
}

// RenderOverlay runs `kustomize build` on an overlay: its kustomization.yaml names the bases as an operator's
// overlay beside a copy of build/deploy would, by relative path: "../deploy" for the root, "../deploy/member"...
// The bases name our images at ImageTag; images the overlay sets win.
func RenderOverlay(kustomization string) ([]byte, error) {
	return build(overlay, kustomization, buildinfo.Read().ImageTag)
}

// overlay is the folder of RenderOverlay's kustomization, beside root.
const overlay = "/overlay"

// Every image the bases name (the images: of their kustomizations) is ours, at one tag, that of the release they
// were last set to. A binary of a build that tagged images (buildinfo.Info.ImageTag: `make build`, the images'
// own kubectl-mcs, `go install` of a release) renders them at its own tag instead: `kubectl mcs join` installs the
// images of its own build. Any other build, and `kubectl apply -k`, keeps the bases' tag.

// ImageTag is the tag the bases' images render at: this binary's build's, else the bases' own.
func ImageTag() (string, error) {
	if tag := buildinfo.Read().ImageTag; tag != "" {
		return tag, nil
	}
	_, tag, err := controllerImage()
	return tag, err
}

// ControllerImage is the reference of the image the controller base runs, at ImageTag: the image of this
// binary's build, which holds kubectl-mcs beside the controller.
func ControllerImage() (string, error) {
	name, _, err := controllerImage()
	if err != nil {
		return "", err
	}
	tag, err := ImageTag()
	return name + ":" + tag, err
}

// controllerImage is the name and tag of the image the controller base names.
func controllerImage() (name, tag string, err error) {
	b, err := bases.ReadFile("controller/kustomization.yaml")
	if err != nil {
		return "", "", err
	}
	var k struct {
		Images []struct {
			NewName string `yaml:"newName"`
			NewTag  string `yaml:"newTag"`
		} `yaml:"images"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		return "", "", fmt.Errorf("deploy: controller/kustomization.yaml: %w", err)
	}
	if len(k.Images) != 1 || k.Images[0].NewName == "" || k.Images[0].NewTag == "" {
		return "", "", fmt.Errorf("deploy: controller/kustomization.yaml names %d images, want one with newName and newTag", len(k.Images))
	}
	return k.Images[0].NewName, k.Images[0].NewTag, nil
}

// retag sets the tag of every image a kustomization.yaml names.
func retag(kustomization []byte, tag string) ([]byte, error) {
	node, err := yaml.Parse(string(kustomization))
	if err != nil {
		return nil, err
	}
	images, err := node.Pipe(yaml.Lookup("images"))
	if err != nil || images == nil {
		return kustomization, err
	}
	entries, err := images.Elements()
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if err := e.PipeE(yaml.SetField("newTag", yaml.NewStringRNode(tag))); err != nil {
			return nil, err
		}
	}
	s, err := node.String()
	return []byte(s), err
}

// build renders dir of an in-memory copy of the bases, where kustomization, unless empty, is the overlay's, and
// where our images are at tag, unless empty.
func build(dir, kustomization, tag string) ([]byte, error) {
	mem := filesys.MakeFsInMemory()
	err := fs.WalkDir(bases, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := bases.ReadFile(p)
		if err != nil {
			return err
		}
		if tag != "" && path.Base(p) == "kustomization.yaml" {
			if b, err = retag(b, tag); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
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
