// Command mkimage builds our images (build/images) for several platforms without a container engine and without
// root: it cross-compiles each binary with the host's Go (static: CGO_ENABLED=0, stripped, without local paths,
// its version and revision linked in) and assembles the images FROM scratch. Run from the module's tree, as
// build/images/build.sh (`make images`) runs it:
//
//	go run ./build/images/mkimage -out bin/images -version v0.2.0 -revision <commit>
//
// For each image NAME it writes OUT/oci/NAME/, an OCI image layout holding the multi-platform index, for a
// registry, and OUT/NAME.tar, the docker-archive of the host's platform, tagged REPO/NAME:VERSION, which the local
// clusterset's kubelet nodes import. It prints each image's size per platform, unpacked and compressed as a
// registry stores it; the host platform's line has no platform after the reference
// ("images: REF  U MB, C MB compressed"), as test/e2e/install reads it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"vksfleet.dev/fleet/build/images"
)

// buildinfo is the package the version and revision are linked into (mcs_controller_build_info, kubectl mcs version).
const buildinfo = "vksfleet.dev/fleet/mcs/buildinfo"

func main() {
	var b images.Build
	out := flag.String("out", "bin/images", "the folder to write the layouts (oci/NAME) and the host's archives (NAME.tar) into")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "the platforms to build for, comma-separated; the host's must be one")
	flag.StringVar(&b.Version, "version", "dev", "the images' tag and the version linked into their binaries")
	flag.StringVar(&b.Revision, "revision", "unknown", "the commit the images are built from")
	flag.StringVar(&b.Repo, "repo", "ghcr.io/vksfleet", "the repository the images are named in")
	flag.StringVar(&b.Source, "source", "https://github.com/vksfleet/fleet", "the org.opencontainers.image.source label")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, b, *out, *platforms); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, b images.Build, out, platformFlag string) error {
	var platforms []v1.Platform
	for s := range strings.SplitSeq(platformFlag, ",") {
		p, err := v1.ParsePlatform(s)
		if err != nil {
			return err
		}
		// FROM scratch Linux images; a variant would also need GOARM or GOARM64 to follow it.
		if p.OS != "linux" || p.Variant != "" {
			return fmt.Errorf("platform %s: only linux/<arch>, without a variant", p)
		}
		platforms = append(platforms, *p)
	}
	host := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	if !slices.ContainsFunc(platforms, host.Equals) {
		return fmt.Errorf("the host's platform %s is not among -platforms %s: the nodes' archive needs it", host, platformFlag)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(out, ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	for _, im := range images.Product {
		if err := image(ctx, b, im, platforms, host, out, work); err != nil {
			return err
		}
	}
	return nil
}

// image builds im for each platform, writes its layout and its host archive into out, and prints its sizes.
func image(ctx context.Context, b images.Build, im images.Image, platforms []v1.Platform, host v1.Platform, out, work string) error {
	tag, err := b.Tag(im)
	if err != nil {
		return err
	}
	var imgs []v1.Image
	var hostImg v1.Image
	for _, p := range platforms {
		dir := filepath.Join(work, im.Name, p.OS+"-"+p.Architecture)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for _, bin := range im.Binaries {
			if err := goBuild(ctx, b, p, bin.Package, filepath.Join(dir, bin.Name)); err != nil {
				return err
			}
		}
		img, err := b.Assemble(im, p, dir)
		if err != nil {
			return err
		}
		imgs = append(imgs, img)
		if p.Equals(host) {
			hostImg = img
		}
	}
	idx, err := b.Index(im, imgs)
	if err != nil {
		return err
	}
	layoutDir := filepath.Join(out, "oci", im.Name)
	if err := images.WriteLayout(layoutDir, tag, idx); err != nil {
		return err
	}
	archive := filepath.Join(out, im.Name+".tar")
	if err := images.WriteArchive(archive, tag, hostImg); err != nil {
		return err
	}
	for i, img := range imgs {
		unpacked, stored, err := images.Sizes(img)
		if err != nil {
			return err
		}
		ref := tag.String()
		if !platforms[i].Equals(host) {
			ref += " " + platforms[i].String()
		}
		fmt.Printf("images: %s  %.1f MB, %.1f MB compressed\n", ref, float64(unpacked)/1e6, float64(stored)/1e6)
	}
	fmt.Printf("images: %s: %s (%s), %s (%s)\n", tag, layoutDir, platformList(platforms), archive, host)
	return nil
}

// goBuild builds pkg for platform p into dst, as `make build` builds it but static, stripped (-s -w) and without
// local paths (-trimpath), which the images need and which makes them smaller and reproducible.
func goBuild(ctx context.Context, b images.Build, p v1.Platform, pkg, dst string) error {
	ldflags := fmt.Sprintf("-s -w -X %s.version=%s -X %s.revision=%s", buildinfo, b.Version, buildinfo, b.Revision)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", dst, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building %s for %s: %w", pkg, p, err)
	}
	return nil
}

// platformList joins platforms for a message: linux/amd64, linux/arm64.
func platformList(platforms []v1.Platform) string {
	var s []string
	for _, p := range platforms {
		s = append(s, p.String())
	}
	return strings.Join(s, ", ")
}
