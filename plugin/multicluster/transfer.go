package multicluster

import (
	"iter"
	"slices"

	"github.com/coredns/coredns/plugin/transfer"
	"github.com/miekg/dns"
)

// Transfer implements transfer.Transferer, for the transfer plugin of the same server block: AXFR, and IXFR
// answered as a full transfer (or the SOA alone when the client is up to date), of the forward zone and of each
// reverse zone exactly as the stanza names it (see zone.Snapshot.Transfer and TransferReverse). Other zones,
// sub-zones included, are not this plugin's. Before the informers have synced the zone is incomplete, so the
// transfer fails (SERVFAIL) rather than handing out part of it, whatever fallthrough says.
func (m *MultiCluster) Transfer(name string, serial uint32) (<-chan []dns.RR, error) {
	name = dns.CanonicalName(name)
	isReverse := slices.Contains(m.reverse, name)
	if name != m.zone && !isReverse {
		return nil, transfer.ErrNotAuthoritative
	}
	// Synced first, then the snapshot: a snapshot taken before would miss what the sync brought.
	if !m.synced() {
		return nil, errNotSynced
	}
	snap := m.index.Snapshot()
	var records iter.Seq[[]dns.RR]
	if isReverse {
		records = snap.TransferReverse(name, serial)
	} else {
		records = snap.Transfer(serial)
	}
	ch := make(chan []dns.RR)
	go func() {
		defer close(ch)
		// The transfer plugin reads the channel to its end even when the client goes away.
		for rrs := range records {
			ch <- rrs
		}
	}()
	return ch, nil
}

var _ transfer.Transferer = (*MultiCluster)(nil)
