package dataplane

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// InNS runs f on an OS thread that has joined network namespace ns, so that the sockets f opens live there: a
// test can be a client inside a pod without a process of its own.
func InNS(ns string, f func() error) error {
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		return fmt.Errorf("dataplane: network namespace %s: %w", ns, err)
	}
	defer target.Close()
	home, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return err
	}
	defer home.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("dataplane: entering %s: %w", ns, err)
			return
		}
		err := f()
		// A thread that cannot go home stays locked, and so dies with this goroutine instead of serving others
		// in the wrong namespace.
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}
