// Package images checks the Dockerfiles without a container engine: each image is FROM scratch only (nothing is
// pulled), runs its binary as the non-root user 65532, carries the OCI labels build.sh fills in and the licence
// label (Apache-2.0, the LICENSE at the repository's root), and runs the file that build.sh puts in its context;
// the controller's also holds kubectl-mcs, for diagnose --in-cluster's probe.
// test/e2e/install builds and runs the images with a real engine.
package images

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	fromRe       = regexp.MustCompile(`(?m)^FROM (\S+)`)
	addRe        = regexp.MustCompile(`(?m)^(?:COPY|ADD) (\S+) /$|^(?:COPY|ADD) (\S+) /(\S+)$`)
	entrypointRe = regexp.MustCompile(`(?m)^ENTRYPOINT \["/(\S+)"\]$`)
)

func TestDockerfiles(t *testing.T) {
	// binary is what build.sh builds into each image's context; coredns goes in as a tar carrying its capability.
	for file, binary := range map[string]string{"coredns.Dockerfile": "coredns", "controller.Dockerfile": "mcs-controller"} {
		t.Run(file, func(t *testing.T) {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			df := string(b)
			for _, m := range fromRe.FindAllStringSubmatch(df, -1) {
				if m[1] != "scratch" {
					t.Errorf("FROM %s: the images must need no registry, FROM scratch only", m[1])
				}
			}
			ep := entrypointRe.FindStringSubmatch(df)
			if ep == nil || ep[1] != binary {
				t.Errorf("ENTRYPOINT %v, want /%s", ep, binary)
			}
			add := addRe.FindStringSubmatch(df)
			switch {
			case add == nil:
				t.Error("no COPY or ADD of the binary")
			case binary == "coredns" && add[0] != "ADD coredns.tar /":
				t.Errorf("%q: coredns must be ADDed from coredns.tar, which carries its file capability", add[0])
			case binary != "coredns" && (add[2] != binary || add[3] != binary):
				t.Errorf("%q: want COPY %s /%s", add[0], binary, binary)
			}
			// kubectl mcs diagnose --in-cluster runs its probe pod from the controller's image.
			if binary == "mcs-controller" && !strings.Contains(df, "\nCOPY kubectl-mcs /kubectl-mcs\n") {
				t.Error("no COPY kubectl-mcs /kubectl-mcs: diagnose --in-cluster runs its probe from this image")
			}
			if !strings.Contains(df, "\nUSER 65532:65532\n") {
				t.Error("the image must run as USER 65532:65532")
			}
			for _, l := range []string{"source", "version", "revision"} {
				if !strings.Contains(df, "org.opencontainers.image."+l+"=") {
					t.Errorf("no org.opencontainers.image.%s label", l)
				}
			}
			if !strings.Contains(df, `org.opencontainers.image.licenses="Apache-2.0"`) {
				t.Error(`no org.opencontainers.image.licenses="Apache-2.0" label (the LICENSE at the repository's root)`)
			}
		})
	}
	build, err := os.ReadFile("build.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X vksfleet.dev/fleet/mcs/buildinfo.version=$version -X vksfleet.dev/fleet/mcs/buildinfo.revision=$revision"`,
		// The tag and the linked version are the tree's, as the Makefile's.
		"version=${VERSION:-$(bash build/images/version.sh)}", "revision=$(bash build/images/version.sh revision)",
		"binary mcs-controller mcs-controller ./cmd/controller", "binary mcs-controller kubectl-mcs ./cmd/kubectl-mcs",
		"binary coredns coredns ./cmd/coredns", "setcap cap_net_bind_service=+ep"} {
		if !strings.Contains(string(build), want) {
			t.Errorf("build.sh does not contain %q", want)
		}
	}
}

// TestVersion runs version.sh in a repository of its own: the tag of the images and the version linked into the
// binaries follow `git describe`, and a tree without git gets "dev".
func TestVersion(t *testing.T) {
	script, err := os.ReadFile("version.sh")
	if err != nil {
		t.Fatal(err)
	}
	tree := t.TempDir()
	if err := os.MkdirAll(filepath.Join(tree, "build", "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "build", "images", "version.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	// The temporary folder is no repository: git must not find the one around this test's package, if any.
	env := append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(tree), "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t",
		"GIT_COMMITTER_EMAIL=t@example.com")
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = tree, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	version := func(args ...string) string {
		return run("bash", append([]string{"build/images/version.sh"}, args...)...)
	}

	if got := version(); got != "dev" {
		t.Errorf("without git: %q, want dev", got)
	}
	if got := version("revision"); got != "unknown" {
		t.Errorf("revision without git: %q, want unknown", got)
	}
	run("git", "init", "-q")
	run("git", "add", ".")
	run("git", "commit", "-q", "-m", "first")
	first := run("git", "rev-parse", "HEAD")
	short := run("git", "rev-parse", "--short", "HEAD")
	if got := version(); got != short {
		t.Errorf("before any tag: %q, want the commit %s", got, short)
	}
	run("git", "tag", "v0.2.0")
	run("git", "tag", "not-a-version")
	if got := version(); got != "v0.2.0" {
		t.Errorf("at a tag: %q, want v0.2.0 (a tag not named v<digit> is not a version)", got)
	}
	if got := version("revision"); got != first {
		t.Errorf("revision: %q, want %s", got, first)
	}
	if err := os.WriteFile(filepath.Join(tree, "build", "images", "version.sh"), append(script, '\n'), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := version(); got != "v0.2.0-dirty" {
		t.Errorf("with a change: %q, want v0.2.0-dirty", got)
	}
	if got := version("revision"); got != first+"-dirty" {
		t.Errorf("revision with a change: %q, want %s-dirty", got, first)
	}
	run("git", "commit", "-q", "-am", "second")
	if got, want := version(), "v0.2.0-1-g"+run("git", "rev-parse", "--short", "HEAD"); got != want {
		t.Errorf("a commit after the tag: %q, want %s", got, want)
	}
}
