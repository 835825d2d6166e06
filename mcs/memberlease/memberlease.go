// Package memberlease is the rule by which a member's broker Lease says the member is alive: it was renewed
// within the grace. The controller judges by it on its own clock (broker.Liveness: since it saw the renew time
// change), kubectl-mcs on the broker's clock from a snapshot; the controller writes its grace into the Lease
// (DurationSeconds) and kubectl-mcs reads it back (GraceOf), so that both judge a member by the grace its own
// controller uses. It sits in mcs/ so that kubectl-mcs shares the rule without linking the controller.
package memberlease

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// DefaultGrace is how long a member's broker Lease may go unrenewed before its endpoints are withdrawn, when the
// controller's --lease-grace does not say otherwise, and the grace of a Lease that does not record one.
const DefaultGrace = 30 * time.Second

// Fresh says whether a Lease last renewed age ago still counts: a Lease exactly one grace old does.
func Fresh(age, grace time.Duration) bool { return age <= grace }

// DurationSeconds is grace as a Lease's spec.leaseDurationSeconds: whole seconds, at least one.
func DurationSeconds(grace time.Duration) int32 { return int32(max(1, grace/time.Second)) }

// GraceOf is the grace a Lease's holder judges by, from its spec.leaseDurationSeconds; DefaultGrace when it
// records none.
func GraceOf(lease *coordinationv1.Lease) time.Duration {
	if lease.Spec.LeaseDurationSeconds == nil {
		return DefaultGrace
	}
	return time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
}
