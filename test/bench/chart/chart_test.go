package chart

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteSVG(t *testing.T) {
	for _, tc := range []struct {
		name  string
		chart Chart
		want  []string
	}{
		{
			name: "lines",
			chart: Lines{Title: "export → import", X: "services", Y: "ms", Series: []Series{
				{Name: "3 members p99", X: []float64{1000, 5000}, Y: []float64{147, 320}},
				{Name: "3 members p50", X: []float64{1000, 5000}, Y: []float64{62, 90}, Style: Dashed},
				{Name: "10 members p99", X: []float64{1000, 5000}, Y: []float64{400, 900}, Color: 1},
			}},
			want: []string{"export → import", "services", "3 members p99", "3 members p50", "10 members p99"},
		},
		{
			name: "bars",
			chart: Bars{Title: "QPS per class", Y: "queries/s", Groups: []string{"ClusterSetIP A", "headless SRV"},
				Series: []BarSeries{
					{Name: "ours", Values: []float64{81597, 79455}},
					{Name: "stock CoreDNS", Values: []float64{53841, 17442}},
					{Name: "whoami ceiling", Values: []float64{77081, 74464}},
				}},
			want: []string{"QPS per class", "ClusterSetIP A", "headless SRV", "ours", "stock CoreDNS", "whoami ceiling"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.chart.WriteSVG(&b); err != nil {
				t.Fatal(err)
			}
			texts := svgTexts(t, b.Bytes())
			for _, w := range tc.want {
				if !texts[w] {
					t.Errorf("no <text> %q in the SVG; texts: %v", w, texts)
				}
			}
		})
	}
}

// svgTexts checks that b is one well-formed <svg> document and returns the contents of its <text> elements.
func svgTexts(t *testing.T, b []byte) map[string]bool {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	texts := map[string]bool{}
	var root string
	inText := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG not well-formed: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Local
			}
			inText = tok.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts[strings.TrimSpace(string(tok))] = true
			}
		case xml.EndElement:
			inText = false
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	return texts
}

func TestWriteSVGRejectsMismatchedData(t *testing.T) {
	for name, c := range map[string]Chart{
		"lines": Lines{Series: []Series{{Name: "s", X: []float64{1, 2}, Y: []float64{1}}}},
		"bars":  Bars{Groups: []string{"a", "b"}, Series: []BarSeries{{Name: "s", Values: []float64{1}}}},
	} {
		if err := c.WriteSVG(io.Discard); err == nil {
			t.Errorf("%s: mismatched data drew without error", name)
		}
	}
}

func TestWriteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.svg")
	if err := WriteFile(path, Lines{Title: "t", Series: []Series{{Name: "s", X: []float64{1}, Y: []float64{2}}}}); err != nil {
		t.Fatal(err)
	}
}
