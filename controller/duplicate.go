package controller

import (
	"fmt"
	"sync"
	"time"

	"vksfleet.dev/fleet/controller/export"
)

// ReasonClusterIDConflict is the ServiceExport Ready=False reason while another cluster claims this member's id.
const ReasonClusterIDConflict = export.ReasonClusterIDConflict

// duplicateID tracks whether another process renews this member's broker Lease: two clusters claim one cluster
// id, as a cluster restored from another's etcd snapshot does (it keeps the kube-system UID, the default id). They
// share one broker namespace, and each would delete the other's records as stale; while the conflict lasts,
// neither deletes anything there, and both say why. It follows one process's renewals (its Renewer), over every
// run of the manager: a run that starts after a join goes on from what the last one's renewals showed.
type duplicateID struct {
	id    string
	grace time.Duration

	mu          sync.Mutex
	renewals    int  // renewals observed by this process
	clean       bool // the last renewal, not this process's first, found no other holder's change
	streak      int  // renewals in a row that found another holder's change
	lastForeign time.Time
	active      bool
}

// observe records whether a renewal at now created the Lease, or found another holder's change, and says whether
// the conflict began or ended. One foreign change can be a leader handover between two replicas of this member;
// two in a row cannot. The conflict ends once no other holder has written for a grace.
func (d *duplicateID) observe(created, foreign bool, now time.Time) (changed bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.renewals++
	// A process's first renewal of a Lease it found cannot tell: it has written nothing yet that another could have
	// changed. One that had to create the Lease knows that no other process held it.
	d.clean = created || (!foreign && d.renewals >= 2)
	if foreign {
		d.streak++
		d.lastForeign = now
		if d.streak >= 2 && !d.active {
			d.active = true
			return true
		}
		return false
	}
	d.streak = 0
	if d.active && now.Sub(d.lastForeign) > d.grace {
		d.active = false
		return true
	}
	return false
}

// Active says whether another cluster is claiming this member's id.
func (d *duplicateID) Active() bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.active
}

// mayDelete says whether this member may delete its broker objects: only once its last renewal showed that no
// other process had renewed the Lease since its previous one (or created it), and while no conflict lasts.
// Another cluster that claims the id, already there at this process's start, shows at its second renewal at the
// latest, before anything is deleted; one that starts later shows at the next renewal, in whichever run.
func (d *duplicateID) mayDelete() bool {
	if d == nil {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.clean && !d.active
}

// message explains the conflict to the owner of an export.
func (d *duplicateID) message() string {
	return fmt.Sprintf("Another controller renews this member's broker Lease too: two clusters claim the cluster id %q "+
		"(a cluster restored from another's etcd snapshot keeps its kube-system UID, the default id). Give one of them a "+
		"new id in its ClusterProperty cluster.clusterset.k8s.io. Nothing is deleted from the broker meanwhile.", d.id)
}
