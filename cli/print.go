package cli

import (
	"encoding/json"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
)

// Output formats of -o, besides kubectl's json and yaml.
const (
	outputTable = ""
	outputWide  = "wide"
)

// validateOutput refuses an -o that print would not handle, before anything is read.
func validateOutput(format string) error {
	if format == outputTable || format == outputWide {
		return nil
	}
	_, err := (&genericclioptions.JSONYamlPrintFlags{}).ToPrinter(format)
	return err
}

// print writes a kubectl table (wide columns with -o wide), or data as JSON or YAML through kubectl's printers.
// data is wrapped as a runtime.Unknown since the plugin's reports are no API objects.
func print(w io.Writer, format string, table *metav1.Table, data any) error {
	if format == outputTable || format == outputWide {
		tw := printers.GetNewTabWriter(w)
		if err := printers.NewTablePrinter(printers.PrintOptions{Wide: format == outputWide}).PrintObj(table, tw); err != nil {
			return err
		}
		return tw.Flush()
	}
	p, err := (&genericclioptions.JSONYamlPrintFlags{}).ToPrinter(format)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return err
	}
	return p.PrintObj(&runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeJSON}, w)
}

// ANSI colours for the diagnose summary.
const (
	red    = "\x1b[31m"
	green  = "\x1b[32m"
	yellow = "\x1b[33m"
	reset  = "\x1b[0m"
)

// summary prints the diagnose verdict after the table, coloured only when w is a terminal that allows it. UNKNOWN
// checks are counted apart: they do not fail diagnose, but a pass that saw less than everything must say so.
func summary(w io.Writer, checks []Check) error {
	failed, unknown := 0, 0
	for _, c := range checks {
		switch c.Result {
		case Fail:
			failed++
		case Unknown:
			unknown++
		}
	}
	var text, colour string
	switch {
	case failed > 0:
		text, colour = fmt.Sprintf("%d of %d checks failed.", failed, len(checks)), red
	case unknown > 0:
		text, colour = fmt.Sprintf("No check failed; %d of %d checks are UNKNOWN (not a failure: diagnose could not see, see their hints).", unknown, len(checks)), yellow
	default:
		text, colour = fmt.Sprintf("All %d checks passed.", len(checks)), green
	}
	if failed > 0 && unknown > 0 {
		text += fmt.Sprintf(" %d UNKNOWN.", unknown)
	}
	if printers.AllowsColorOutput(w) {
		text = colour + text + reset
	}
	_, err := fmt.Fprintln(w, text)
	return err
}

func diagnoseTable(checks []Check) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Result", Type: "string"}, {Name: "Check", Type: "string"}, {Name: "Cluster", Type: "string"},
		{Name: "Service", Type: "string"}, {Name: "Message", Type: "string"}, {Name: "Hint", Type: "string"},
	}}
	for _, c := range checks {
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{string(c.Result), c.Check, c.Cluster, dash(c.Service), c.Message, dash(c.Hint)}})
	}
	return t
}
