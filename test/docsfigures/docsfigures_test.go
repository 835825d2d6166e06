package docsfigures

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the repository's root, relative to this package.
const root = "../.."

// resultsDirs are where the programs that measure write their results: the benchmarks, and the suites of
// others run against ours.
var resultsDirs = []string{"test/bench/results/", "test/e2e/conformance/results/", "test/e2e/k8sdns/results/"}

// TestDocs checks every marked block of README.md and docs/*.md against its results file and the Makefile.
func TestDocs(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append([]string{filepath.Join(root, "README.md")}, docs...)
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	dated := regexp.MustCompile(`20\d\d-\d\d-\d\d`)
	total := 0
	for _, doc := range docs {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, doc)
		blocks, err := Blocks(rel, string(text))
		if err != nil {
			t.Error(err)
			continue
		}
		for _, b := range blocks {
			total++
			if !slices.ContainsFunc(resultsDirs, func(dir string) bool { return strings.HasPrefix(b.Results, dir) }) {
				t.Errorf("%s:%d: %s is not a results file under %s", b.Doc, b.Line, b.Results, strings.Join(resultsDirs, ", "))
				continue
			}
			results, err := os.ReadFile(filepath.Join(root, b.Results))
			if err != nil {
				t.Errorf("%s:%d: %v", b.Doc, b.Line, err)
				continue
			}
			if !dated.Match(results) {
				t.Errorf("%s:%d: %s carries no date", b.Doc, b.Line, b.Results)
			}
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(b.Target) + `:`).Match(makefile) {
				t.Errorf("%s:%d: no make target %q", b.Doc, b.Line, b.Target)
			}
			if missing := Missing(b.Text, string(results)); len(missing) > 0 {
				t.Errorf("%s:%d: figures not in %s: %s", b.Doc, b.Line, b.Results, strings.Join(missing, ", "))
			}
		}
	}
	if total == 0 {
		t.Error("no marked figures found in README.md and docs/*.md")
	}
}

func TestBlocks(t *testing.T) {
	for _, c := range []struct {
		name, text string
		want       []Block
		err        bool
	}{
		{name: "table", text: "intro\n<!-- figures: test/bench/results/dns.md (make bench-dns) -->\n| a | b |\n| 1 | 2 |\n\nafter 3",
			want: []Block{{Doc: "d", Line: 2, Results: "test/bench/results/dns.md", Target: "bench-dns", Text: "| a | b |\n| 1 | 2 |"}}},
		{name: "variables after the target", text: "<!-- figures: test/bench/results/scale.md (make bench-sync SCALE=1) -->\nabc 5\n",
			want: []Block{{Doc: "d", Line: 1, Results: "test/bench/results/scale.md", Target: "bench-sync", Text: "abc 5"}}},
		{name: "no marker", text: "| 1 | 2 |\n"},
		{name: "no make command", text: "<!-- figures: test/bench/results/dns.md -->\n| 1 |\n", err: true},
		{name: "no block", text: "<!-- figures: test/bench/results/dns.md (make bench-dns) -->\n\n| 1 |\n", err: true},
		{name: "at the end", text: "<!-- figures: test/bench/results/dns.md (make bench-dns) -->", err: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Blocks("d", c.text)
			if (err != nil) != c.err {
				t.Fatalf("error %v, want error %v", err, c.err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestNumbers(t *testing.T) {
	for _, c := range []struct {
		text string
		want []string
	}{
		{"**1.38** (93,370 vs 67,463)", []string{"1.38", "93370", "67463"}},
		{"p50 p99 cluster-a2 v1beta1 x5000", nil},
		{"10x5000", []string{"10"}},
		{"0.4-2.9 s; 36 [20–40] ms.", []string{"0.4", "2.9", "36", "20", "40"}},
		{"3,6,10 and 1,000,000", []string{"3", "6", "10", "1000000"}},
		{"2026-11-26", []string{"2026", "11", "26"}},
	} {
		if got := Numbers(c.text); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Numbers(%q) = %q, want %q", c.text, got, c.want)
		}
	}
}

func TestMissing(t *testing.T) {
	results := "| ClusterSetIP A | 93370 | 67463 | **1.38** |\nrestart **1.60 s**, 12187 answered"
	for _, c := range []struct {
		name, block string
		want        []string
	}{
		{"every figure present", "**1.38** (93,370 vs 67,463), 1.60 s, 12,187", nil},
		{"a figure changed", "**1.39** (93,370 vs 67,463)", []string{"1.39"}},
		{"a rounded figure", "1.6 s", []string{"1.6"}},
		{"reported once", "94 and 94", []string{"94"}},
		{"a decimal is not its integer part", "1", []string{"1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Missing(c.block, results); !reflect.DeepEqual(got, c.want) {
				t.Errorf("Missing = %q, want %q", got, c.want)
			}
		})
	}
}
