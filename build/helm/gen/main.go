// Command gen writes the Helm chart build/helm/vksfleet-member from the kustomize bases of build/deploy; `make
// helm-chart` runs it through go generate, in build/helm.
package main

import (
	"fmt"
	"os"

	"vksfleet.dev/fleet/build/helm"
)

func main() {
	if err := helm.Write(helm.ChartDir); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
