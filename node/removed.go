package node

import (
	"encoding/binary"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
)

// Telling a member it was removed is final for it (it stops with
// ErrRemoved until its data directory is wiped), so the leader does it only
// when its view of the configuration cannot be stale:
//
//   - reconcile runs only while the leader is active: the first entry of its
//     term is applied, so every configuration change committed in an earlier
//     term is applied here;
//   - the members to tell were seen alive, with raft data and outside the
//     configuration before the leader issues a ReadIndex; once a quorum
//     confirms it (no later leader existed when it was issued) and the
//     read's index is applied, those still outside the configuration are
//     told.
//
// Why that is enough: a member gets raft data only from a leader that has
// applied its addition, so the addition was committed in some term T'. The
// member's data was announced before the read was issued, so T' began
// before that too; a confirmed read proves no leader newer than this one's
// term existed then, so T' is this term or earlier, and the addition is in
// this leader's applied configuration — unless a later committed change
// removed it again, in which case the notice is right.

// removalRound is one ReadIndex confirming that the members in ids, seen
// outside the configuration, may be told.
type removalRound struct {
	id        uint64
	term      uint64
	ids       []uint64
	issued    time.Time
	confirmed bool
	index     uint64 // the read's index, once confirmed
}

// confirmRemoved runs from reconcile, on an active leader, with the members
// now seen alive, with raft data and outside the configuration.
func (n *Node) confirmRemoved(outside []uint64, now time.Time) {
	gs := &n.loop.gossip
	if r := gs.removal; r != nil {
		switch {
		case r.term != n.loop.term:
			gs.removal = nil // another term: start over
		case r.confirmed && n.loop.lastApplied >= r.index:
			gs.removal = nil
			for _, id := range r.ids {
				if slices.Contains(outside, id) { // still outside, at the read's index or later
					n.tellRemoved(id, now)
				}
			}
			return
		case now.Sub(r.issued) < 2*n.cfg.electionTimeout():
			return // waiting for the read or the apply
		default:
			gs.removal = nil // lost: ask again
		}
	}
	var ids []uint64
	for _, id := range outside {
		if at, ok := gs.told[id]; !ok || now.Sub(at) >= 10*time.Second {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	gs.removalID++
	var rctx [9]byte
	rctx[0] = 'r'
	binary.BigEndian.PutUint64(rctx[1:], gs.removalID)
	gs.removal = &removalRound{id: gs.removalID, term: n.loop.term, ids: ids, issued: now}
	n.rn.ReadIndex(rctx[:])
}

// onRemovalReadStates marks the removal round confirmed when its ReadIndex
// comes back; reconcile acts on it once the index is applied.
func (n *Node) onRemovalReadStates(rss []raft.ReadState) {
	r := n.loop.gossip.removal
	if r == nil {
		return
	}
	for _, rs := range rss {
		c := rs.RequestCtx
		if len(c) == 9 && c[0] == 'r' && binary.BigEndian.Uint64(c[1:]) == r.id {
			r.confirmed, r.index = true, rs.Index
			n.tryDo(n.reconcile)
		}
	}
}
