// Command pause is the sandbox ("pause") image of the local clusterset's real nodes: containerd starts it first in
// every pod to hold the pod's namespaces. No registry is reachable, so the image is built here (test/env/nodeimages)
// instead of pulled. It waits for SIGTERM or SIGINT and then exits 0; as PID 1 of a pod that shares its process
// namespace it also reaps every child that exits, so that no zombie is left behind.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			return
		}
		// Signals of one kind coalesce: reap every exited child, not just one.
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
