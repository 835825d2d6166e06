package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"vksfleet.dev/fleet/test/bench/chart"
)

// Chart files, beside the report.
const (
	minimalChart  = "dns-minimal.svg"
	deployedChart = "dns-deployed.svg"
)

// writeCharts draws the QPS of every class, by server name then class, into dir: with the minimal Corefile ours
// against stock and the ceiling, with the deployed one ours against stock.
func writeCharts(dir string, classes []string, qps map[string]map[string]float64) error {
	bars := func(title string, series ...[2]string) chart.Bars {
		b := chart.Bars{Title: title, Y: "queries per second, one core", Groups: classes}
		for _, s := range series {
			v := make([]float64, len(classes))
			for i, c := range classes {
				v[i] = qps[s[0]][c]
			}
			b.Series = append(b.Series, chart.BarSeries{Name: s[1], Values: v})
		}
		return b
	}
	for file, c := range map[string]chart.Chart{
		minimalChart: bars("Minimal Corefile (errors, kubernetes, multicluster)",
			[2]string{"ours", "ours"}, [2]string{"stock", "stock CoreDNS 1.15"}, [2]string{"ceiling", "ceiling (whoami behind the same plugins)"}),
		deployedChart: bars("Deployed Corefile (with cache, loadbalance, prometheus, …)",
			[2]string{"ours-deployed", "ours"}, [2]string{"stock-deployed", "stock CoreDNS 1.15"}),
	} {
		if err := chart.WriteFile(filepath.Join(dir, file), c); err != nil {
			return err
		}
	}
	return nil
}

// qpsColumns name the servers of report's QPS columns; "deployed" sections prefix them as their Corefile does.
var qpsColumns = map[string]string{"ours QPS": "ours", "stock QPS": "stock", "ceiling QPS": "ceiling", "bare whoami QPS": "bare"}

// parseReport reads the QPS columns of a report this program wrote, so that charts can be drawn from recorded
// results without measuring again: the classes in table order, and QPS by server name then class.
func parseReport(path string) ([]string, map[string]map[string]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var classes []string
	qps := map[string]map[string]float64{}
	suffix := ""
	var columns []string // server name per column of the current table, "" for others
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			suffix, columns = "", nil
			if strings.HasPrefix(line, "## Deployed") {
				suffix = "-deployed"
			}
		case !strings.HasPrefix(line, "|"):
			columns = nil
		case strings.HasPrefix(line, "| query class |"):
			columns = nil
			for _, h := range cells(line) {
				name := qpsColumns[h]
				if name != "" {
					name += suffix
				}
				columns = append(columns, name)
			}
		case columns != nil && !strings.HasPrefix(line, "|---"):
			row := cells(line)
			class := row[0]
			if suffix == "" {
				classes = append(classes, class)
			}
			for i, name := range columns {
				if name == "" || i >= len(row) {
					continue
				}
				v, err := strconv.ParseFloat(strings.Trim(row[i], "*"), 64)
				if err != nil {
					return nil, nil, fmt.Errorf("%s: %s, %s: %w", path, class, name, err)
				}
				if qps[name] == nil {
					qps[name] = map[string]float64{}
				}
				qps[name][class] = v
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	if len(classes) == 0 || qps["ours"] == nil {
		return nil, nil, errors.New(path + ": no QPS table of ours")
	}
	return classes, qps, nil
}

// cells splits a Markdown table row into its trimmed cells.
func cells(row string) []string {
	parts := strings.Split(strings.Trim(strings.TrimSpace(row), "|"), "|")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}
