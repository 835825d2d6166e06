package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// startPublish follows whether this process has published, as records, every export its member had when it
// started (names.AnnotationRecordsPublished): a member of the previous release that is joined again with this one
// is read in records by the other members only once they hold all of its exports, or its imports elsewhere would
// lose what it had not republished yet.
type startPublish struct {
	mu      sync.Mutex
	started bool
	pending map[types.NamespacedName]bool
	early   map[types.NamespacedName]bool // published before the start was taken: reconciles run beside it
}

// start takes the exports the member has at the process's start; only the first call counts.
func (p *startPublish) start(keys []types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return
	}
	p.started, p.pending = true, map[types.NamespacedName]bool{}
	for _, k := range keys {
		if !p.early[k] {
			p.pending[k] = true
		}
	}
	p.early = nil
}

// published notes that the service's export, or its absence, is on the broker.
func (p *startPublish) published(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.started {
		if p.early == nil {
			p.early = map[types.NamespacedName]bool{}
		}
		p.early[key] = true
	}
	delete(p.pending, key)
}

// done says whether every export of the start is published.
func (p *startPublish) done() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started && len(p.pending) == 0
}
