// Package conformance runs the upstream MCS API conformance suite (sigs.k8s.io/mcs-api's conformance/, a copy
// kept unmodified outside the repository, default ../shared/mcs-api-conformance) against a local fleet on kubelet
// nodes: TestConformance, which `make conformance` runs. This file builds the suite and reads its reports.
package conformance

import (
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
)

// DefaultSuite is where the suite's source is, relative to the repository's root: shared/ beside the work tree.
const DefaultSuite = "../shared/mcs-api-conformance"

// suiteBinary is the name of the built suite, as the suite's UPSTREAM.md names it.
const suiteBinary = "mcs-conformance.test"

// buildSuite builds the suite in src, unmodified, and returns the binary's path. It copies src into a folder
// of cache named after a digest of src's files and of the Go version, and builds there (src itself may be
// read-only, and `go test -c` writes nothing but its output). A binary already built from the same files is
// reused: a cold build takes minutes on 2 cores.
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
	work := filepath.Join(dir, "src")
	if err := os.RemoveAll(work); err != nil {
		return "", err
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
	var reports []struct {
		SpecReports []struct {
			ContainerHierarchyTexts []string
			LeafNodeType            string
			LeafNodeText            string
			State                   string
			Failure                 struct{ Message string }
		}
	}
	if err := json.Unmarshal(b, &reports); err != nil {
		return specResults{}, fmt.Errorf("ginkgo JSON report: %w", err)
	}
	if len(reports) == 0 {
		return specResults{}, errors.New("ginkgo JSON report: no suite")
	}
	var r specResults
	for _, rep := range reports {
		for _, s := range rep.SpecReports {
			text := strings.Join(slices.DeleteFunc(append(slices.Clone(s.ContainerHierarchyTexts), s.LeafNodeText),
				func(s string) bool { return s == "" }), " ")
			failure := fmt.Sprintf("%s [%s]: %s", cmp.Or(text, s.LeafNodeType), s.State, compact(s.Failure.Message, maxMessage))
			if s.LeafNodeType != "It" {
				if s.State != "passed" {
					r.SuiteFailures = append(r.SuiteFailures, failure)
				}
				continue
			}
			r.Total++
			switch s.State {
			case "passed":
				r.Passed++
			case "skipped", "pending":
				r.Skipped++
			default: // failed, panicked, interrupted, aborted, timedout
				r.Failed++
				r.Failures = append(r.Failures, failure)
			}
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

// compact puts s on one line, runs of white space made one space, and cuts it to n bytes.
func compact(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + " ..."
	}
	return s
}
