package conformance

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseGinkgoJSON(t *testing.T) {
	for _, tc := range []struct {
		name    string
		json    string
		want    specResults
		wantErr bool
	}{{
		name: "only It nodes count as specs; a passing BeforeSuite is no failure",
		json: `[{"SpecReports":[
			{"LeafNodeType":"BeforeSuite","State":"passed"},
			{"ContainerHierarchyTexts":["","Connectivity to a service that is not exported"],"LeafNodeType":"It","LeafNodeText":"should be inaccessible","State":"passed"},
			{"ContainerHierarchyTexts":[""],"LeafNodeType":"It","LeafNodeText":"A DNS SRV query should return valid SRV records","State":"failed","Failure":{"Message":"Timed out after 20.001s.\nExpected\n..."}},
			{"LeafNodeType":"It","LeafNodeText":"needs two clusters","State":"skipped"},
			{"LeafNodeType":"It","LeafNodeText":"hung","State":"timedout","Failure":{"Message":"A suite timeout occurred"}},
			{"LeafNodeType":"ReportAfterSuite","LeafNodeText":"MCS conformance report","State":"passed"}]}]`,
		want: specResults{Total: 4, Passed: 1, Failed: 2, Skipped: 1, Failures: []string{
			"A DNS SRV query should return valid SRV records [failed]: Timed out after 20.001s. Expected ...",
			"hung [timedout]: A suite timeout occurred",
		}},
	}, {
		name: "a failed BeforeSuite is a suite failure, and its specs are skipped",
		json: `[{"SpecReports":[{"LeafNodeType":"BeforeSuite","State":"failed","Failure":{"Message":"Test suite set up failed\n  error listing ServiceExports"}},
			{"LeafNodeType":"It","LeafNodeText":"x","State":"skipped"}]}]`,
		want: specResults{Total: 1, Skipped: 1, SuiteFailures: []string{"BeforeSuite [failed]: Test suite set up failed error listing ServiceExports"}},
	}, {
		name: "no suite", json: `[]`, wantErr: true,
	}, {
		name: "not JSON", json: `Ran 27 of 27 Specs`, wantErr: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseGinkgoJSON([]byte(tc.json))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("no error; got %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Total != tc.want.Total || got.Passed != tc.want.Passed || got.Failed != tc.want.Failed ||
				got.Skipped != tc.want.Skipped || !slices.Equal(got.Failures, tc.want.Failures) ||
				!slices.Equal(got.SuiteFailures, tc.want.SuiteFailures) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseReportYAML(t *testing.T) {
	// The shape the suite's report.go writes (yaml.v3, field names in lower case).
	doc := `groups:
    - name: Required
      tests:
        - desc: Connectivity to a service that is not exported should be inaccessible
          passed: true
          conformant: true
    - name: Optional
      tests:
        - desc: A DNS SRV query should return valid SRV records
          passed: false
          conformant: false
          message: " - Received SRV records [] do not match"
        - desc: A ServiceImport should have the IP families
          passed: false
          failed: true
          conformant: true
          message: " - timed out"
        - desc: needs two clusters
          skipped: true
          conformant: true
suitefailure: ""
dnsdomain: clusterset.local
passed: 1
total: 4
`
	got, err := parseReportYAML([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"Optional: A DNS SRV query should return valid SRV records (non-conformant) - Received SRV records [] do not match",
		"Optional: A ServiceImport should have the IP families (failed) - timed out",
		"Optional: needs two clusters (skipped)",
	}
	if got.Passed != 1 || got.Total != 4 || got.SuiteFailure != "" || !slices.Equal(got.NotPassed, want) {
		t.Errorf("got %+v\nwant 1 of 4 passed and not passed %q", got, want)
	}
	if _, err := parseReportYAML([]byte("groups: [")); err == nil {
		t.Error("a broken report parsed without error")
	}
}

// TestSuiteFiles checks what the build's digest covers: the sources, not a binary or reports left in the folder.
func TestSuiteFiles(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{
		"go.mod": "module x\n", "conformance_suite.go": "package conformance\n", "sub/a.gohtml": "<p>",
		suiteBinary: "ELF", "report.yaml": "total: 1\n", "report.html": "<html>",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, err := suiteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	if want := []string{"conformance_suite.go", "go.mod", "sub/a.gohtml"}; !slices.Equal(names, want) {
		t.Errorf("files %q, want %q", names, want)
	}
	if _, err := suiteFiles(filepath.Join(dir, "sub")); err == nil {
		t.Error("a folder without the suite was accepted")
	}
}

// TestParentVersion reads go.mod files as `go mod edit -json` prints them: upstream's, which takes
// sigs.k8s.io/mcs-api from the folder above it, a copy that takes it from the module proxy, and replacements the
// build cannot provide.
func TestParentVersion(t *testing.T) {
	const head = "module sigs.k8s.io/mcs-api/conformance\n\ngo 1.23.0\n\nrequire (\n\tk8s.io/api v0.32.5\n\tsigs.k8s.io/mcs-api v0.5.0\n)\n"
	for _, tc := range []struct {
		name, gomod, want string
		wantErr           bool
	}{
		{name: "upstream's: the repository's root", gomod: head + "replace sigs.k8s.io/mcs-api => ..\n", want: "v0.5.0"},
		{name: "the root written with a slash", gomod: head + "replace sigs.k8s.io/mcs-api => ../\n", want: "v0.5.0"},
		{name: "no replacement", gomod: head},
		{name: "a replacement by a module version", gomod: head + "replace k8s.io/api => k8s.io/api v0.32.6\n"},
		{name: "another module by a folder", gomod: head + "replace k8s.io/api => ../api\n", wantErr: true},
		{name: "mcs-api by another folder", gomod: head + "replace sigs.k8s.io/mcs-api => ../../mcs-api\n", wantErr: true},
		{name: "the root without a version to put there", gomod: "module x\n\ngo 1.23.0\n\nreplace sigs.k8s.io/mcs-api => ..\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "go.mod")
			if err := os.WriteFile(p, []byte(tc.gomod), 0o644); err != nil {
				t.Fatal(err)
			}
			js, err := exec.Command("go", "mod", "edit", "-json", p).Output()
			if err != nil {
				t.Fatalf("go mod edit -json: %v", err)
			}
			got, err := parentVersion(js)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parentVersion = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestFindSuite checks where the suite's source comes from: a local copy, by a path absolute or relative to the
// repository, else the pinned module, whose fetch, failing, names both ways.
func TestFindSuite(t *testing.T) {
	repo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, "copy"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, local := range []string{"copy", filepath.Join(repo, "copy")} {
		if got, err := findSuite(ctx, repo, local); err != nil || got != filepath.Join(repo, "copy") {
			t.Errorf("findSuite(%q) = %q, %v; want %s", local, got, err, filepath.Join(repo, "copy"))
		}
	}
	if _, err := findSuite(ctx, repo, "absent"); err == nil || !strings.Contains(err.Error(), "CONFORMANCE_SUITE") {
		t.Errorf("a missing local copy: %v; want an error naming CONFORMANCE_SUITE", err)
	}
	// No network and an empty module cache: the fetch fails, at once.
	t.Setenv("GOPROXY", "off")
	t.Setenv("GOMODCACHE", t.TempDir())
	_, err := findSuite(ctx, repo, "")
	if err == nil {
		t.Fatal("the suite was fetched with GOPROXY=off")
	}
	for _, want := range []string{SuiteModule + "@" + SuiteCommit, "GOPROXY", "CONFORMANCE_SUITE=", SuiteCommit} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
}
