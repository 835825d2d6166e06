package conformance

import (
	"os"
	"path/filepath"
	"slices"
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
