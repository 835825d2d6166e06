// Package docsfigures checks that the measured figures quoted in README.md and docs/*.md come from the results
// files that the benchmarks write.
//
// The convention: a table or paragraph that quotes measured figures is preceded, on the line just before it, by
//
//	<!-- figures: test/bench/results/FILE.md (make TARGET [VAR=VALUE...]) -->
//
// and the block runs from the next line to the first blank line. Every number in the block (digits with an
// optional decimal part and thousands commas, not part of a word such as p99 or 10x5000) must appear as a number
// in the named file, and TARGET must be a target of the Makefile. The test is a plain unit test: it reads files
// and starts nothing.
package docsfigures

import (
	"fmt"
	"regexp"
	"strings"
)

// markerRe matches a figures marker: the results file, then the make command that writes it.
var markerRe = regexp.MustCompile(`^<!-- figures: (\S+) \(make ([a-z][a-z0-9-]*)((?: [A-Z_]+=\S+)*)\) -->$`)

// numberRe matches a number that does not continue a word: its first digit follows the start of the text or a
// character that is not a letter, digit, underscore or dot.
var numberRe = regexp.MustCompile(`(?:^|[^A-Za-z0-9_.])(\d+(?:,\d{3})*(?:\.\d+)?)`)

// Block is one marked block of a document.
type Block struct {
	Doc     string // the document's path
	Line    int    // the marker's line, from 1
	Results string // the results file, relative to the repository's root
	Target  string // the make target that writes the results file
	Text    string // the block's lines
}

// Blocks returns the marked blocks of a document, and an error for a marker that is malformed or not followed
// by a block.
func Blocks(doc, text string) ([]Block, error) {
	lines := strings.Split(text, "\n")
	var blocks []Block
	for i, line := range lines {
		if !strings.HasPrefix(strings.TrimSpace(line), "<!-- figures:") {
			continue
		}
		m := markerRe.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			return nil, fmt.Errorf("%s:%d: malformed marker %q, want <!-- figures: FILE (make TARGET) -->", doc, i+1, line)
		}
		end := i + 1
		for end < len(lines) && strings.TrimSpace(lines[end]) != "" {
			end++
		}
		if end == i+1 {
			return nil, fmt.Errorf("%s:%d: marker not followed by a table or paragraph", doc, i+1)
		}
		blocks = append(blocks, Block{Doc: doc, Line: i + 1, Results: m[1], Target: m[2],
			Text: strings.Join(lines[i+1:end], "\n")})
	}
	return blocks, nil
}

// Numbers returns the numbers of text, thousands commas removed, in order.
func Numbers(text string) []string {
	var out []string
	for _, m := range numberRe.FindAllStringSubmatch(text, -1) {
		out = append(out, strings.ReplaceAll(m[1], ",", ""))
	}
	return out
}

// Missing returns the numbers of block that results does not hold, each once, in order.
func Missing(block, results string) []string {
	have := map[string]bool{}
	for _, n := range Numbers(results) {
		have[n] = true
	}
	var missing []string
	seen := map[string]bool{}
	for _, n := range Numbers(block) {
		if !have[n] && !seen[n] {
			missing = append(missing, n)
			seen[n] = true
		}
	}
	return missing
}
