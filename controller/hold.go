package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// hold delays acting on what a service's view shows until it has shown it for a while: a withdrawal until a
// broker losing its data would have been noticed, a Pending status until a DNS server slower than usual has had
// its chance. Each service's clock starts the first time it is asked and stops when forgotten.
type hold struct {
	d     time.Duration
	mu    sync.Mutex
	since map[types.NamespacedName]time.Time
}

func newHold(d time.Duration) *hold {
	return &hold{d: d, since: map[types.NamespacedName]time.Time{}}
}

// wait returns how much longer key must wait, counting from the first time it was asked.
func (h *hold) wait(key types.NamespacedName, now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	first, ok := h.since[key]
	if !ok {
		h.since[key], first = now, now
	}
	return max(0, h.d-now.Sub(first))
}

// forget stops key's clock: what it waited for no longer shows, or was acted on.
func (h *hold) forget(key types.NamespacedName) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.since, key)
}

// elapsed returns how long key has waited since it was first asked; 0 when it is not waiting.
func (h *hold) elapsed(key types.NamespacedName, now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	first, ok := h.since[key]
	if !ok {
		return 0
	}
	return now.Sub(first)
}
