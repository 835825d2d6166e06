// Package conformance runs the upstream MCS API conformance suite (sigs.k8s.io/mcs-api's conformance/, unmodified:
// the pinned commit fetched through the Go module proxy, or a local copy) against a local fleet on kubelet nodes:
// TestConformance, which `make conformance` runs. This file finds and builds the suite and reads its reports.
package conformance

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"vksfleet.dev/fleet/test/framework"
)

// The suite `make conformance` runs unless CONFORMANCE_SUITE names a local copy: the conformance/ folder of
// sigs.k8s.io/mcs-api at a pinned commit. Upstream it is a Go module of its own, which has no tags: `go mod
// download` resolves the commit to its pseudo-version through the module proxy (or the repository, with
// GOPROXY=direct) and keeps it in the module cache.
const (
	SuiteModule = "sigs.k8s.io/mcs-api/conformance"
	SuiteCommit = "ded161af6ea9596cd9e878c61ed4f4e8d5cf8401"
)

// mcsAPIModule is the module upstream's suite replaces by the folder above it, the repository's root
// (`replace sigs.k8s.io/mcs-api => ..`).
const mcsAPIModule = "sigs.k8s.io/mcs-api"

// suiteBinary is the name of the built suite.
const suiteBinary = "mcs-conformance.test"

// findSuite returns the folder of the suite's source: local, absolute or relative to the repository's root repo,
// when it is set; else the pinned module, fetched into the module cache. The error says both ways.
func findSuite(ctx context.Context, repo, local string) (string, error) {
	if local != "" {
		if !filepath.IsAbs(local) {
			local = filepath.Join(repo, local)
		}
		if _, err := os.Stat(local); err != nil {
			return "", fmt.Errorf("CONFORMANCE_SUITE: %w", err)
		}
		return local, nil
	}
	dir, err := download(ctx, SuiteModule, SuiteCommit)
	if err != nil {
		return "", fmt.Errorf("fetching the MCS API conformance suite: %w\n"+
			"It is fetched through the Go module proxy (GOPROXY; GOPROXY=direct fetches it from github.com). Without "+
			"either, give a local copy of sigs.k8s.io/mcs-api's conformance/ folder at commit %s: "+
			"`make conformance CONFORMANCE_SUITE=/path/to/mcs-api/conformance`", err, SuiteCommit)
	}
	return dir, nil
}

// download runs `go mod download -json module@version` and returns the module's folder in the module cache.
// It runs in an empty folder, outside any module, so that no go.mod or go.sum changes.
func download(ctx context.Context, module, version string) (string, error) {
	tmp, err := os.MkdirTemp("", "conformance-download-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	// On failure too, the JSON says why in Error.
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %v; %s", module, version, errors.Join(runErr, err), strings.TrimSpace(stderr.String()))
	}
	switch {
	case m.Error != "": // it names the module and version
		return "", fmt.Errorf("go mod download: %s", m.Error)
	case runErr != nil || m.Dir == "":
		return "", fmt.Errorf("go mod download %s@%s: %v %s", module, version, runErr, strings.TrimSpace(stderr.String()))
	}
	return m.Dir, nil
}

// goModJSON is what `go mod edit -json` prints of a go.mod, in the parts parentVersion reads.
type goModJSON struct {
	Require []struct{ Path, Version string }
	Replace []struct {
		Old struct{ Path string }
		New struct{ Path, Version string }
	}
}

// parentVersion reads the suite's go.mod (as `go mod edit -json` prints it). Upstream's replaces
// sigs.k8s.io/mcs-api by "..", the repository's root, which a copy of the folder alone lacks: parentVersion
// returns the version of sigs.k8s.io/mcs-api the go.mod requires, which the build puts there. It returns "" when
// the go.mod replaces nothing by a folder, and an error for any other replacement by a folder.
func parentVersion(modJSON []byte) (string, error) {
	var m goModJSON
	if err := json.Unmarshal(modJSON, &m); err != nil {
		return "", fmt.Errorf("the suite's go.mod: %w", err)
	}
	parent := false
	for _, r := range m.Replace {
		if r.New.Version != "" { // a module version, fetched as any other
			continue
		}
		if r.Old.Path != mcsAPIModule || filepath.Clean(r.New.Path) != ".." {
			return "", fmt.Errorf("the suite's go.mod replaces %s by the folder %s: only %s => .. can be provided",
				r.Old.Path, r.New.Path, mcsAPIModule)
		}
		parent = true
	}
	if !parent {
		return "", nil
	}
	for _, r := range m.Require {
		if r.Path == mcsAPIModule {
			return r.Version, nil
		}
	}
	return "", fmt.Errorf("the suite's go.mod replaces %s by .. but requires no version of it", mcsAPIModule)
}

// buildSuite builds the suite in src, unmodified, and returns the binary's path. It copies src into a folder
// of cache named after a digest of src's files and of the Go version, and builds there (src itself may be
// read-only, and `go test -c` writes nothing but its output). Where the suite's go.mod takes sigs.k8s.io/mcs-api
// from the folder above it, as upstream's does, the copy goes into the conformance/ folder of a copy of that
// module at the version the go.mod requires, from the module cache. A binary already built from the same files
// is reused: a cold build takes minutes on 2 cores.
func buildSuite(ctx context.Context, src, cache string) (string, error) {
	files, err := suiteFiles(src)
	if err != nil {
		return "", err
	}
	goVersion, err := exec.CommandContext(ctx, "go", "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOVERSION: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", strings.TrimSpace(string(goVersion)))
	for _, name := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(h, "%s %d\n", name, len(files[name]))
		h.Write(files[name])
	}
	dir := filepath.Join(cache, hex.EncodeToString(h.Sum(nil))[:16])
	bin := filepath.Join(dir, suiteBinary)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	modJSON, err := exec.CommandContext(ctx, "go", "mod", "edit", "-json", filepath.Join(src, "go.mod")).Output()
	if err != nil {
		return "", fmt.Errorf("go mod edit -json %s: %w", filepath.Join(src, "go.mod"), err)
	}
	parent, err := parentVersion(modJSON)
	if err != nil {
		return "", err
	}
	root := filepath.Join(dir, "src")
	if err := os.RemoveAll(root); err != nil {
		return "", err
	}
	work := root
	if parent != "" {
		mod, err := download(ctx, mcsAPIModule, parent)
		if err != nil {
			return "", fmt.Errorf("the suite builds against %s %s, the folder above it upstream: %w", mcsAPIModule, parent, err)
		}
		if err := os.CopyFS(root, os.DirFS(mod)); err != nil {
			return "", fmt.Errorf("copying %s %s: %w", mcsAPIModule, parent, err)
		}
		work = filepath.Join(root, "conformance")
	}
	for name, data := range files {
		p := filepath.Join(work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return "", err
		}
	}
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin+".tmp", ".")
	cmd.Dir = work
	// The copy is a module of its own; a go.work above it, or this module's flags, must not apply to it.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the conformance suite in %s: %v\n%s", work, err, out)
	}
	return bin, os.Rename(bin+".tmp", bin)
}

// suiteFiles reads every regular file under src, by slash-separated path relative to it. The built binary and
// the reports of a run made in src itself are left out: they are not source.
func suiteFiles(src string) (map[string][]byte, error) {
	files := map[string][]byte{}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		switch rel {
		case suiteBinary, "report.html", "report.yaml":
			return nil
		}
		data, err := os.ReadFile(p)
		files[filepath.ToSlash(rel)] = data
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the conformance suite: %w", err)
	}
	if files["go.mod"] == nil || files["conformance_suite.go"] == nil {
		return nil, fmt.Errorf("%s does not hold the conformance suite (no go.mod or conformance_suite.go)", src)
	}
	return files, nil
}

// specResults are the spec outcomes of a ginkgo JSON report (-ginkgo.json-report).
type specResults struct {
	Total, Passed, Failed, Skipped int
	// Failures are the full texts of the specs that neither passed nor were skipped, each with its state and its
	// failure message on one line; SuiteFailures the same for set-up and reporting nodes (BeforeSuite).
	Failures, SuiteFailures []string
}

// parseGinkgoJSON counts the specs (It nodes) of a ginkgo JSON report by outcome.
func parseGinkgoJSON(b []byte) (specResults, error) {
	nodes, err := framework.GinkgoNodes(b)
	if err != nil {
		return specResults{}, err
	}
	var r specResults
	for _, n := range nodes {
		failure := fmt.Sprintf("%s [%s]: %s", cmp.Or(n.Text(), n.LeafNodeType), n.State, framework.Compact(n.Failure.Message, maxMessage))
		if !n.IsSpec() {
			if n.State != "passed" {
				r.SuiteFailures = append(r.SuiteFailures, failure)
			}
			continue
		}
		r.Total++
		switch n.State {
		case "passed":
			r.Passed++
		case "skipped", "pending":
			r.Skipped++
		default: // failed, panicked, interrupted, aborted, timedout
			r.Failed++
			r.Failures = append(r.Failures, failure)
		}
	}
	return r, nil
}

// conformanceReport is what the suite's own report.yaml says: the specs in its Required and Optional groups, each
// conformant, non-conformant or failed for another reason, and a set-up failure if the suite could not start.
type conformanceReport struct {
	Passed, Total int
	SuiteFailure  string
	// NotPassed are the descriptions of the tests that did not pass, each with the report's message.
	NotPassed []string
}

// parseReportYAML reads the suite's report.yaml.
func parseReportYAML(b []byte) (conformanceReport, error) {
	var doc struct {
		Groups []struct {
			Name  string
			Tests []struct {
				Desc                                string
				Passed, Failed, Skipped, Conformant bool
				Message                             string
			}
		}
		SuiteFailure  string
		Passed, Total int
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return conformanceReport{}, fmt.Errorf("report.yaml: %w", err)
	}
	r := conformanceReport{Passed: doc.Passed, Total: doc.Total, SuiteFailure: doc.SuiteFailure}
	for _, g := range doc.Groups {
		for _, t := range g.Tests {
			if t.Passed {
				continue
			}
			verdict := "failed"
			switch {
			case t.Skipped:
				verdict = "skipped"
			case !t.Conformant:
				verdict = "non-conformant"
			}
			r.NotPassed = append(r.NotPassed, fmt.Sprintf("%s: %s (%s)%s", g.Name, t.Desc, verdict, t.Message))
		}
	}
	return r, nil
}

// maxMessage bounds a failure message in a summary: gomega's say what was expected and what came, in a few lines.
const maxMessage = 600
