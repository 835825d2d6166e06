package multicluster

import "errors"

// errNotSynced is what queries and transfers get before the informers have synced: SERVFAIL, never an answer
// from a partial view.
var errNotSynced = errors.New("multicluster: caches not synced")

// Ready implements the ready plugin's Readiness: true once every informer has synced and the index holds what
// they listed.
func (m *MultiCluster) Ready() bool { return m.synced() }
