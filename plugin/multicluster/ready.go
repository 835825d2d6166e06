package multicluster

import (
	"errors"
	"sync/atomic"

	"github.com/coredns/caddy"
)

// errNotSynced is what queries and transfers get before the informers have synced: SERVFAIL, never an answer
// from a partial view.
var errNotSynced = errors.New("multicluster: caches not synced")

// stopping is set once the process got its stop signal (caddy's ShutdownEvent, emitted on SIGTERM or SIGINT before
// any shutdown callback; a Corefile reload emits none), and never cleared: the process is going away.
var stopping atomic.Bool

func init() {
	caddy.RegisterEventHook(Name+"-stopping", func(ev caddy.EventName, _ any) error {
		if ev == caddy.ShutdownEvent {
			stopping.Store(true)
		}
		return nil
	})
}

// Ready implements the ready plugin's Readiness: true once every informer has synced and the index holds what
// they listed, and false again from the stop signal on. A stopping server still answers for the health plugin's
// lameduck, but it must leave the Service's endpoints before it stops answering: while it stays Ready, kube-proxy
// keeps the UDP conntrack entries that point at it, and a client's query whose address and port match one of
// them (a source port used again within the entry's 30 s) goes to the pod even after it has stopped, and is lost.
// Not Ready, the endpoint is no longer serving, and kube-proxy deletes those entries while the pod still answers.
func (m *MultiCluster) Ready() bool { return !stopping.Load() && m.synced() }
