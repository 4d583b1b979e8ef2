package fleet

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/node/internal/readctx"
	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
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

// confirmRemoved runs from reconcile, on an active leader of term (raft's
// term now: raftTerm), with the members now seen alive, with raft data and
// outside the configuration.
func (f *Fleet) confirmRemoved(outside []uint64, now time.Time, term, raftTerm uint64) {
	rec := &f.rec
	if r := rec.removal; r != nil {
		switch {
		case r.term != term:
			rec.removal = nil // another term: start over
		case r.confirmed && f.host.Applied() >= r.index:
			rec.removal = nil
			for _, id := range r.ids {
				if slices.Contains(outside, id) { // still outside, at the read's index or later
					f.tellRemoved(id, now, raftTerm)
				}
			}
			return
		case now.Sub(r.issued) < 2*f.cfg.ElectionTimeout:
			return // waiting for the read or the apply
		default:
			rec.removal = nil // lost: ask again
		}
	}
	var ids []uint64
	for _, id := range outside {
		if at, ok := rec.told[id]; !ok || now.Sub(at) >= 10*time.Second {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	rec.removalID++
	rec.removal = &removalRound{id: rec.removalID, term: term, ids: ids, issued: now}
	f.host.ReadIndex(readctx.Encode(readctx.Removal, rec.removalID))
}

// ReadStates marks the removal round confirmed when its ReadIndex comes
// back; reconcile acts on it once the index is applied (loop).
func (f *Fleet) ReadStates(rss []raft.ReadState) {
	r := f.rec.removal
	if r == nil {
		return
	}
	for _, rs := range rss {
		if id, ok := readctx.Decode(rs.RequestCtx, readctx.Removal); ok && id == r.id {
			r.confirmed, r.index = true, rs.Index
			f.wake()
		}
	}
}

// tellRemoved notifies a live member that has raft state but is not in the
// configuration. New members join with no state and are added as learners
// before they receive any, so such a member was removed (typically while it
// was down past the threshold) and came back with a stale log: without the
// notice it would campaign forever and its Lock calls would wait forever.
// Runs in the loop; the call itself runs on its own goroutine. At most one
// notice per member every 10 s.
func (f *Fleet) tellRemoved(id uint64, now time.Time, term uint64) {
	rec := &f.rec
	if rec.told == nil {
		rec.told = map[uint64]time.Time{}
	}
	if at, ok := rec.told[id]; ok && now.Sub(at) < 10*time.Second {
		return
	}
	rec.told[id] = now
	if rec.left[id] {
		f.log.Info("gossip: a member that left still runs; telling it it was removed", "id", views.MemberID(id))
	} else {
		f.log.Warn("gossip: member has raft state but is not in the configuration; telling it it was removed", "id", views.MemberID(id))
	}
	cs := f.host.ConfState()
	req := &transportpb.RemovedRequest{Term: term, Applied: f.host.Applied(),
		Voters: slices.Clone(cs.GetVoters()), Learners: slices.Clone(cs.GetLearners())}
	net := f.host.Net()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), f.cfg.ElectionTimeout)
		defer cancel()
		if _, err := net.Removed(ctx, id, req); err != nil {
			f.log.Debug("gossip: removed notice not delivered", "id", views.MemberID(id), "err", err)
		}
	}()
}

// JudgeRemoved decides whether to believe a notice that this node was
// removed (loop): it stops for good, so the notice must come from the leader
// this node follows or, if it follows none (a removed member campaigns in
// vain), from a voter it knows or gossip reports with raft data; the
// configuration the notice was judged from must not list it and must be
// newer than this node's, unless this node's own already lacks it. nil
// means it was believed: the node stops with its ErrRemoved.
func (f *Fleet) JudgeRemoved(from uint64, req *transportpb.RemovedRequest) error {
	st := f.host.Status()
	if err := removedVerdict(removedView{self: f.cfg.ID, term: st.GetTerm(), lead: st.Lead, applied: f.host.Applied(),
		conf: f.host.ConfState(), known: f.members.Allows}, from, req); err != nil {
		return err
	}
	if f.host.Closing() {
		// Leave asked for it: the expected end, not an incident.
		f.log.Info("removed from the cluster as Leave asked; stopping", "told_by", views.MemberID(from))
	} else {
		// One ERROR line for this event: the node's, as it stops serving.
		f.log.Info("removed from the cluster while away: stopping", "told_by", views.MemberID(from))
	}
	return nil
}

// removedView is what a node judges a removed notice against.
type removedView struct {
	self, term, lead, applied uint64
	conf                      *raftpb.ConfState
	known                     func(uint64) bool // members with raft data (MemberSet.Allows)
}

// removedVerdict is JudgeRemoved's rule (pure; FuzzRemovedRequest): nil
// means believe the notice.
func removedVerdict(v removedView, from uint64, req *transportpb.RemovedRequest) error {
	denied := func(format string, a ...any) error {
		return fmt.Errorf("%w: removed notice from %016x: %s", transport.ErrPermissionDenied, from, fmt.Sprintf(format, a...))
	}
	switch {
	case slices.Contains(req.GetVoters(), v.self) || slices.Contains(req.GetLearners(), v.self):
		return denied("its configuration lists this node")
	case !slices.Contains(req.GetVoters(), from):
		return denied("it is not a voter of its own configuration")
	case req.GetTerm() < v.term:
		return denied("term %d is behind this node's %d", req.GetTerm(), v.term)
	case req.GetApplied() <= v.applied && inConf(v.conf, v.self):
		return denied("its configuration (applied %d) is not newer than this node's (%d), which lists this node",
			req.GetApplied(), v.applied)
	case v.lead != 0 && v.lead != from:
		return denied("this node follows %016x", v.lead)
	case v.lead == 0 && !slices.Contains(v.conf.GetVoters(), from) && !v.known(from):
		return denied("not a voter or member known here")
	}
	return nil
}

func inConf(cs *raftpb.ConfState, id uint64) bool {
	return slices.Contains(cs.GetVoters(), id) || slices.Contains(cs.GetLearners(), id) ||
		slices.Contains(cs.GetVotersOutgoing(), id)
}
