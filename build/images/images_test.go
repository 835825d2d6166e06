// Package images checks the Dockerfiles without a container engine: each image is FROM scratch only (nothing is
// pulled), runs its binary as the non-root user 65532, carries the OCI labels build.sh fills in and the licence
// label (Apache-2.0, the LICENSE at the repository's root), and runs the file that build.sh puts in its context.
// test/e2e/install builds and runs the images with a real engine.
package images

import (
	"os"
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
	for _, want := range []string{`CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X vksfleet.dev/fleet/mcs/buildinfo.version=$version -X vksfleet.dev/fleet/mcs/buildinfo.revision=$revision"`, "binary mcs-controller ./cmd/controller",
		"binary coredns ./cmd/coredns", "setcap cap_net_bind_service=+ep"} {
		if !strings.Contains(string(build), want) {
			t.Errorf("build.sh does not contain %q", want)
		}
	}
}
