// Package images checks what can be checked of the container images without a container engine: each
// Dockerfile's build line produces a static binary at the path its ENTRYPOINT runs, as a non-root user.
package images

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	buildRe      = regexp.MustCompile(`(?m)^RUN (CGO_ENABLED=0) go build (.*) -o /out/(\S+) (\./cmd/\S+)$`)
	copyRe       = regexp.MustCompile(`(?m)^COPY --from=build /out/(\S+) /(\S+)$`)
	entrypointRe = regexp.MustCompile(`(?m)^ENTRYPOINT \["/(\S+)"\]$`)
)

func TestDockerfilesBuildStaticNonRootBinaries(t *testing.T) {
	files, err := filepath.Glob("*.Dockerfile")
	if err != nil || len(files) != 2 {
		t.Fatalf("want the coredns and controller Dockerfiles, found %v (%v)", files, err)
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			df := string(b)
			m := buildRe.FindStringSubmatch(df)
			if m == nil {
				t.Fatal("no `RUN CGO_ENABLED=0 go build ... -o /out/NAME ./cmd/PKG` line")
			}
			cp, ep := copyRe.FindStringSubmatch(df), entrypointRe.FindStringSubmatch(df)
			if cp == nil || cp[1] != m[3] || ep == nil || ep[1] != cp[2] {
				t.Fatalf("the built /out/%s is not what ENTRYPOINT runs (COPY %v, ENTRYPOINT %v)", m[3], cp, ep)
			}
			if !strings.Contains(df, "\nUSER 65532:65532\n") || !strings.Contains(df, "distroless/static") {
				t.Error("the final stage must be distroless/static running as USER 65532:65532")
			}
			out := filepath.Join(t.TempDir(), m[3])
			args := append([]string{"build"}, shellFields(m[2])...)
			cmd := exec.Command("go", append(args, "-o", out, m[4])...)
			cmd.Dir = "../.."
			cmd.Env = append(os.Environ(), m[1])
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %v\n%s", cmd.Args, err, b)
			}
			bin, err := elf.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer bin.Close()
			for _, p := range bin.Progs {
				if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
					t.Errorf("%s is dynamically linked (program header %v)", m[3], p.Type)
				}
			}
		})
	}
}

// shellFields splits s at spaces outside single quotes and drops the quotes, as the shell does for RUN lines.
func shellFields(s string) []string {
	var fields []string
	var cur strings.Builder
	quoted, started := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted, started = !quoted, true
		case r == ' ' && !quoted:
			if started {
				fields = append(fields, cur.String())
				cur.Reset()
				started = false
			}
		default:
			cur.WriteRune(r)
			started = true
		}
	}
	if started {
		fields = append(fields, cur.String())
	}
	return fields
}
