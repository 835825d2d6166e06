package fleet

import (
	"fmt"
	"os/exec"
)

// Binaries are the programs a fleet runs, as module packages: ours to ship, and the local clusterset's node agent
// and the serve program its test pods run.
var Binaries = []string{
	"vksfleet.dev/fleet/cmd/coredns",
	"vksfleet.dev/fleet/cmd/controller",
	"vksfleet.dev/fleet/test/cmd/nodeagent",
	"vksfleet.dev/fleet/test/cmd/serve",
}

// Build builds Binaries into dir, for a test that needs a BinDir; it must run inside the module.
func Build(dir string) error {
	cmd := exec.Command("go", append([]string{"build", "-o", dir + "/"}, Binaries...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the fleet's binaries: %v\n%s", err, out)
	}
	return nil
}
