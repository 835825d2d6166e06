package framework

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"vksfleet.dev/fleet/test/env/clusterset"
	"vksfleet.dev/fleet/test/env/nodeimages"
)

// productImages are the docker-archives `make images` writes into bin/images.
var productImages = []string{"coredns.tar", "mcs-controller.tar"}

// ProductImages are the references of our two images in a fleet with nodes, as their archives name them: `make
// images` tags them with the tree's version (build/images/version.sh), which this tree's joins install.
type ProductImages struct {
	Controller, DNS string
}

// podsMode prepares the clusterset options for a fleet whose product runs in pods: kubelet nodes, which load the
// test images (built into dir) and our images, whose references it returns.
func podsMode(ctx context.Context, opts *Options, dir string) (ProductImages, error) {
	imagesDir := opts.ImagesDir
	var root string
	if imagesDir == "" {
		var err error
		if root, err = clusterset.RepoRoot(); err != nil {
			return ProductImages{}, err
		}
		imagesDir = filepath.Join(root, "bin", "images")
	}
	var archives []string
	var oldest os.FileInfo
	refs := map[string]string{}
	for _, name := range productImages {
		p := filepath.Join(imagesDir, name)
		fi, err := os.Stat(p)
		if err != nil {
			return ProductImages{}, fmt.Errorf("fleet: image %s not found in %s: run `make images` first", name, imagesDir)
		}
		if oldest == nil || fi.ModTime().Before(oldest.ModTime()) {
			oldest = fi
		}
		tags, err := nodeimages.ArchiveTags(p)
		if err != nil {
			return ProductImages{}, fmt.Errorf("fleet: %w: run `make images`", err)
		}
		refs[name] = tags[0]
		archives = append(archives, p)
	}
	// The repository's own images must hold its code as it is; images from elsewhere are the caller's business.
	if root != "" {
		if err := checkFresh(root, oldest); err != nil {
			return ProductImages{}, err
		}
	}
	test, err := nodeimages.Build(ctx, dir)
	if err != nil {
		return ProductImages{}, err
	}
	opts.ClusterSet.Images = append(append(opts.ClusterSet.Images, test...), archives...)
	return ProductImages{Controller: refs["mcs-controller.tar"], DNS: refs["coredns.tar"]}, nil
}

// imageSources are the folders (and files) of the repository whose Go code and build files go into our images:
// the controller's image also holds kubectl-mcs (the --in-cluster DNS probe), with the manifests it embeds.
var imageSources = []string{"api", "cmd/controller", "cmd/coredns", "cmd/kubectl-mcs", "cli", "controller", "mcs", "plugin",
	"build/deploy", "build/images", "go.mod", "go.sum"}

// checkFresh fails when an image archive (the oldest of them) is older than a source it is built from: a test
// would otherwise run yesterday's controller without a word. `make test` builds the images first; `go test` alone
// does not.
func checkFresh(root string, image os.FileInfo) error {
	for _, src := range imageSources {
		err := filepath.WalkDir(filepath.Join(root, src), func(path string, d os.DirEntry, err error) error {
			switch {
			case errors.Is(err, fs.ErrNotExist) && path == filepath.Join(root, src):
				return nil
			case err != nil:
				return err
			case d.IsDir() && d.Name() == "testdata":
				return filepath.SkipDir
			case d.IsDir() || strings.HasSuffix(path, "_test.go"):
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if fi.ModTime().After(image.ModTime()) {
				rel, _ := filepath.Rel(root, path)
				return fmt.Errorf("fleet: bin/images/%s is older than %s: run `make images`", image.Name(), rel)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
