package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"

	"vksfleet.dev/fleet/test/env/clusterset"
)

// Release is another commit's build of the product, for a fleet that starts on it (Options.KubectlMCS and
// JoinArgs) and is upgraded to this tree's: its kubectl-mcs and its images, tagged apart from this tree's so that
// nodes hold both.
type Release struct {
	// Commit is the full commit the release is built from.
	Commit string
	// Tag is its images' tag: "prev-" and the commit's first 12 digits (this tree's: build/images/version.sh).
	Tag string
	// KubectlMCS is its kubectl-mcs binary.
	KubectlMCS string
	// Images are its docker-archives, coredns.tar and mcs-controller.tar, for clusterset.Options.Images.
	Images []string
	// ControllerImage and DNSImage are its images' references, which its join takes as --controller-image and
	// --dns-image.
	ControllerImage, DNSImage string
}

// JoinArgs are the join flags that make the release's join install the release's images.
func (r *Release) JoinArgs() []string {
	return []string{"--controller-image", r.ControllerImage, "--dns-image", r.DNSImage}
}

// BuildRelease builds commit's kubectl-mcs and images with that commit's own build (build/images/build.sh, in the
// private Docker engine of build/docker.sh), from its tree as `git archive` gives it, once: the build is kept
// under the repository's .cache/releases/<commit>/ and reused. It needs root, as `make images` does. Progress
// goes to log.
func BuildRelease(ctx context.Context, commit string, log io.Writer) (*Release, error) {
	root, err := clusterset.RepoRoot()
	if err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--verify", "--quiet", commit+"^{commit}").Output()
	if err != nil {
		return nil, fmt.Errorf("release: commit %s is not in this clone (a shallow clone?): fetch it with "+
			"`git fetch --unshallow` or `git fetch origin %s`", commit, commit)
	}
	full := string(out[:40])
	tag := "prev-" + full[:12]
	dir := filepath.Join(root, ".cache", "releases", full)
	r := &Release{
		Commit: full, Tag: tag, KubectlMCS: filepath.Join(dir, "kubectl-mcs"),
		Images:          []string{filepath.Join(dir, "images", "coredns.tar"), filepath.Join(dir, "images", "mcs-controller.tar")},
		ControllerImage: "ghcr.io/vksfleet/mcs-controller:" + tag, DNSImage: "ghcr.io/vksfleet/coredns:" + tag,
	}
	// One build at a time: .cache/ may be shared by several work trees.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "done")); err == nil {
		return r, nil
	}
	// A build cut short leaves its folder, which the next one starts over.
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "release: building %s from its tree (kubectl-mcs, images tagged %s) into %s\n", full, tag, dir)
	// The tree is not a repository, and .cache/ may sit inside another's work tree: neither git nor go may take
	// that one's commit for the release's (its images say revision "unknown"; their tag names the commit).
	env := append(os.Environ(), "GIT_CEILING_DIRECTORIES="+dir, "GOFLAGS=-buildvcs=false")
	run := func(cmd *exec.Cmd) error {
		cmd.Stdout, cmd.Stderr, cmd.Env = log, log, append(slices.Clip(env), cmd.Env...)
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("release %s: %s: %w", full[:12], cmd.String(), err)
		}
		return nil
	}
	archive := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, full, src)
	if err := run(archive); err != nil {
		return nil, err
	}
	kubectl := exec.CommandContext(ctx, "go", "build", "-o", r.KubectlMCS, "./cmd/kubectl-mcs")
	kubectl.Dir = src
	if err := run(kubectl); err != nil {
		return nil, err
	}
	// The release's own image build, in this repository's Docker engine (its state and lock are shared).
	images := exec.CommandContext(ctx, "bash", "build/docker.sh", "run", "bash", "build/images/build.sh")
	images.Dir = src
	images.Env = append([]string{}, "VERSION="+tag, "FLEET_DOCKER_STATE="+filepath.Join(root, ".cache", "docker"))
	if err := run(images); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "images"), 0o755); err != nil {
		return nil, err
	}
	for _, p := range r.Images {
		if err := os.Rename(filepath.Join(src, "bin", "images", filepath.Base(p)), p); err != nil {
			return nil, err
		}
	}
	if err := os.RemoveAll(src); err != nil {
		return nil, err
	}
	return r, errors.Join(os.WriteFile(filepath.Join(dir, "done"), nil, 0o644))
}
