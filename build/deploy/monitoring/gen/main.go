// Command gen writes build/deploy/monitoring/prometheusrule.yaml from rules.yaml; go generate runs it there.
package main

import (
	"fmt"
	"os"

	"vksfleet.dev/fleet/build/deploy/monitoring"
)

func main() {
	if err := monitoring.Write(monitoring.Dir); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
