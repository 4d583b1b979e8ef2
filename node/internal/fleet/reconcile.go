package fleet

import (
	"context"
	"slices"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// reconcileState is the loop-owned part of cluster management.
type reconcileState struct {
	pending *pendingChange
	// marks: each member's health mark, kept by this node while it leads
	// in marks.Term. A node that leads again in a later term starts
	// afresh: a mark from its earlier term says nothing of the time
	// between, and kept it would make a member killed just now look failed
	// since then (and be replaced before DeadVoterAfter).
	marks     Marks
	removed   map[uint64]bool
	leaveWait map[uint64][]chan error // raft id -> Leave calls waiting for its removal
	told      map[uint64]time.Time    // last "removed" notice sent, by raft id
	foreign   map[uint64]bool         // members of another formation, logged once
	removal   *removalRound           // confirmation before telling members they were removed (removed.go)
	left      map[uint64]bool         // members removed because they asked to leave (Close)
	removalID uint64
}

type pendingChange struct {
	kind membership.ChangeKind
	id   uint64
	at   time.Time
}

// Marks are the leader's health marks of the members, kept for one term.
type Marks struct {
	Term uint64
	ByID map[uint64]HealthMark
}

// HealthMark is when a member's health last changed. A change of role
// restarts the clock, so a member is stable for StabilizeFor in its current
// role before the next step.
type HealthMark struct {
	Healthy bool
	Role    int // 0 outside the configuration, 1 learner, 2 voter
	Since   time.Time
}

// HealthMarks are the marks reconcile keeps (loop). The node's tests plant
// a stale one.
func (f *Fleet) HealthMarks() *Marks { return &f.rec.marks }

// busy reports whether a configuration change proposed less than five
// election timeouts ago is still pending (loop).
func (f *Fleet) busy(now time.Time) bool {
	p := f.rec.pending
	return p != nil && now.Sub(p.at) < 5*f.cfg.ElectionTimeout
}

// ClaimRemoval records an operator's removal of id (a learner or a voter)
// about to be proposed, so that reconcile waits for it to apply; false if
// another change is pending (loop). Without gossip nothing reconciles, and
// it always succeeds.
func (f *Fleet) ClaimRemoval(id uint64, learner bool, now time.Time) bool {
	if f.gossip == nil {
		return true
	}
	if f.busy(now) {
		return false
	}
	kind := membership.RemoveVoter
	if learner {
		kind = membership.RemoveLearner
	}
	f.rec.pending = &pendingChange{kind: kind, id: id, at: now}
	return true
}

// wake asks for a reconcile step on the loop, if its queue has room.
func (f *Fleet) wake() { f.host.TryDo(f.reconcile) }

// leaveAnswerGrace is how long a member that left is still admitted, for
// the answer to its Leave to reach it.
const leaveAnswerGrace = time.Second

// OnConfChange keeps the transport, the member set and the reconcile state
// in step with an applied configuration change (loop). A member removed is
// revoked: the transport refuses it from then on. raft hands a restarted
// node the changes since its last snapshot again, so a removal there is
// revoked again; one compacted into the snapshot is still kept out of raft
// by the configuration, not refused by the transport.
func (f *Fleet) OnConfChange(cc raftpb.ConfChangeI) {
	v2 := cc.AsV2()
	rec := &f.rec
	for _, ch := range v2.GetChanges() {
		id := ch.GetNodeId()
		switch ch.GetType() {
		case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
			if addr := string(v2.GetContext()); addr != "" && id != f.cfg.ID {
				f.host.Net().AddPeer(id, addr)
			}
		case raftpb.ConfChangeRemoveNode:
			f.members.Remove(id)
			// A member that left (Leave), in either mode, waits for this.
			for _, w := range rec.leaveWait[id] {
				w <- nil
			}
			if id != f.cfg.ID {
				// Refused from now on, whatever its certificate (calls to
				// it still work: the leader tells it it was removed). One
				// waiting for its Leave is answered first, on the
				// connection revoking would close.
				if net := f.host.Net(); len(rec.leaveWait[id]) > 0 {
					time.AfterFunc(leaveAnswerGrace, func() { net.Revoke(id) })
				} else {
					net.Revoke(id)
				}
			}
			delete(rec.leaveWait, id)
			if f.gossip == nil {
				continue
			}
			rec.removed[id] = true
			if id == f.cfg.ID {
				f.log.Info("this node was removed from the raft configuration")
			}
		}
	}
	if f.gossip != nil && rec.pending != nil {
		rec.pending = nil
		f.wake() // the next step, without waiting a round
	}
}

// reconcile is the leader's membership step (loop): at most one
// configuration change per call, and none while the previous one is
// pending. It runs only once the leader is active (the first entry of its
// term applied, so every configuration change committed before its term is
// applied here): a new leader's configuration may lack a change an earlier
// leader committed.
func (f *Fleet) reconcile() {
	if f.list == nil || f.host.Closing() {
		return
	}
	l := f.host.Leadership()
	if !l.Leading || !l.Active {
		return
	}
	f.reconcileAt(time.Now(), l.Term)
}

// reconcileAt is reconcile's step at now, on the active leader of term.
func (f *Fleet) reconcileAt(now time.Time, term uint64) {
	rec := &f.rec
	if rec.marks.Term != term {
		rec.marks = Marks{Term: term, ByID: map[uint64]HealthMark{}}
	}
	if p := rec.pending; p != nil {
		if now.Sub(p.at) < 5*f.cfg.ElectionTimeout {
			return
		}
		f.log.Warn("gossip: configuration change not applied in time; planning again", "change", p.kind.String(), "id", views.MemberID(p.id))
		rec.pending = nil
	}
	cs := f.host.ConfState()
	if cs == nil || len(cs.GetVotersOutgoing()) > 0 {
		return
	}
	st := f.host.Status()
	in := membership.PlanInput{
		LeaderID:   f.cfg.ID,
		Voters:     cs.GetVoters(),
		Learners:   cs.GetLearners(),
		LastIndex:  st.Progress[f.cfg.ID].Match,
		Thresholds: f.gossip.Thresholds,
	}
	maxLag := f.gossip.Thresholds.MaxLag
	if maxLag == 0 {
		maxLag = membership.DefaultThresholds().MaxLag
	}
	for id := range rec.removed {
		in.Removed = append(in.Removed, id)
	}
	type info struct {
		state membership.State
		meta  membership.Meta
	}
	seen := map[uint64]info{}
	own := f.Formation()
	for _, m := range f.list() {
		if m.Meta.Formation != "" && m.Meta.Formation != own {
			// A member of another formed cluster: never added, removed or
			// told anything. For this cluster it is not there.
			if !rec.foreign[m.Meta.RaftID] {
				rec.foreign[m.Meta.RaftID] = true
				f.log.Warn("gossip: member belongs to another formed cluster with the same ClusterID; ignoring it",
					"member", m.Name, "id", views.MemberID(m.Meta.RaftID), "its_formation", m.Meta.Formation, "formation", own)
			}
			continue
		}
		if old, ok := seen[m.Meta.RaftID]; ok && old.state == membership.StateAlive {
			continue
		}
		seen[m.Meta.RaftID] = info{m.State, m.Meta}
	}
	var outside []uint64
	for id, inf := range seen {
		// Same formation only: a member with raft data and no formation id
		// while this cluster has one is not of this cluster either (members
		// adopt the id before they receive any raft data).
		inConf := slices.Contains(cs.GetVoters(), id) || slices.Contains(cs.GetLearners(), id)
		if inf.state == membership.StateAlive && inf.meta.HasData && id != f.cfg.ID && inf.meta.Formation == own && !inConf {
			outside = append(outside, id)
		} else if inf.state == membership.StateAlive && rec.removed[id] && id != f.cfg.ID && !inConf &&
			(inf.meta.Formation == own || inf.meta.Formation == "") {
			// An id removed from this configuration (a learner removed
			// before it had raft data, say) is never added again
			// (membership.PlanInput.Removed): without being told it would
			// stay a light member of a removed id for ever. Told, it stops
			// with ErrRemoved and comes back with a fresh data directory.
			outside = append(outside, id)
		}
	}
	f.confirmRemoved(outside, now, term, st.GetTerm())
	ids := map[uint64]bool{}
	for id := range seen {
		ids[id] = true
	}
	for id := range st.Progress {
		ids[id] = true
	}
	addrs := map[uint64]string{}
	for id := range ids {
		inf, ok := seen[id]
		if !ok {
			inf.state = membership.StateFailed
		}
		addrs[id] = inf.meta.RaftAddr
		pr, inConfig := st.Progress[id]
		if !inConfig && !f.mayParticipate(id) {
			continue // never a learner: its certificate is not a voter's
		}
		h := membership.MemberHealth{RaftID: id, Gossip: inf.state, HasData: inf.meta.HasData}
		healthy := inf.state == membership.StateAlive
		role := 0
		if inConfig {
			h.RecentActive, h.Match = pr.RecentActive, pr.Match
			if id == f.cfg.ID {
				h.RecentActive = true
			}
			// Match 0: nothing replicated yet, however short the log.
			healthy = healthy && h.RecentActive && pr.Match > 0 && in.LastIndex-min(pr.Match, in.LastIndex) <= maxLag
			role = 1
			if !pr.IsLearner {
				role = 2
			}
		}
		mark, ok := rec.marks.ByID[id]
		if !ok || mark.Healthy != healthy || mark.Role != role {
			mark = HealthMark{Healthy: healthy, Role: role, Since: now}
			rec.marks.ByID[id] = mark
		}
		if healthy {
			h.HealthyFor = now.Sub(mark.Since)
		} else {
			h.UnhealthyFor = now.Sub(mark.Since)
		}
		in.Members = append(in.Members, h)
	}
	for id := range rec.marks.ByID {
		if !ids[id] {
			delete(rec.marks.ByID, id)
		}
	}
	plan := membership.PlanVoters(in)
	if plan.Change == membership.NoChange {
		return
	}
	cc := &raftpb.ConfChangeV2{Context: []byte(addrs[plan.RaftID])}
	var t raftpb.ConfChangeType
	switch plan.Change {
	case membership.AddLearner:
		t = raftpb.ConfChangeAddLearnerNode
	case membership.PromoteLearner:
		t = raftpb.ConfChangeAddNode
	case membership.RemoveVoter, membership.RemoveLearner:
		t = raftpb.ConfChangeRemoveNode
	default:
		return
	}
	cc.Changes = []*raftpb.ConfChangeSingle{{Type: t.Enum(), NodeId: new(plan.RaftID)}}
	if err := f.host.ProposeConfChange(cc); err != nil {
		f.log.Warn("gossip: propose configuration change", "change", plan.Change.String(), "id", views.MemberID(plan.RaftID), "err", err)
		return
	}
	rec.pending = &pendingChange{kind: plan.Change, id: plan.RaftID, at: now}
	f.log.Info("gossip: configuration change proposed", "change", plan.Change.String(), "id", views.MemberID(plan.RaftID), "reason", plan.Reason)
}

// ProposeRemoval proposes, on the leader, the removal of id for good (a
// member's Leave, in gossip or static mode; the caller is always the
// member removed). res gets nil once id is out of the applied
// configuration, or an error at once (loop).
func (f *Fleet) ProposeRemoval(id uint64, res chan error) {
	if !f.host.Leadership().Leading {
		res <- f.cfg.ErrUnavailable
		return
	}
	cs := f.host.ConfState()
	if !slices.Contains(cs.GetVoters(), id) && !slices.Contains(cs.GetLearners(), id) {
		res <- nil
		return
	}
	rec := &f.rec
	if rec.pending == nil || rec.pending.id != id || rec.pending.kind != membership.RemoveVoter {
		if f.busy(time.Now()) {
			res <- f.cfg.ErrUnavailable // another change in flight; the caller retries
			return
		}
		cc := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: new(id)}}}
		if err := f.host.ProposeConfChange(cc); err != nil {
			res <- err
			return
		}
		rec.pending = &pendingChange{kind: membership.RemoveVoter, id: id, at: time.Now()}
		f.log.Info("gossip: removing a leaving member", "id", views.MemberID(id))
	}
	if rec.left == nil {
		rec.left = map[uint64]bool{}
	}
	rec.left[id] = true // its "you were removed" notice is then routine
	rec.leaveWait[id] = append(rec.leaveWait[id], res)
}

// LeaveCluster removes this node from the raft configuration through the
// leader (after leadership was handed over), for Leave. conf is the node's
// ConfState. Bounded by ctx; false if the removal was not confirmed.
func (f *Fleet) LeaveCluster(ctx context.Context, conf func(context.Context) (voters, learners []uint64, err error)) bool {
	self := f.cfg.ID
	voters, learners, err := conf(ctx)
	inConfig := err == nil && (slices.Contains(voters, self) || slices.Contains(learners, self))
	if inConfig && !(len(voters) == 1 && voters[0] == self) {
		for ctx.Err() == nil {
			lead := f.host.Leader()
			if lead != 0 && lead != self {
				cctx, cancel := context.WithTimeout(ctx, 2*f.cfg.ElectionTimeout)
				_, err := f.host.Net().Leave(cctx, lead, &transportpb.LeaveRequest{})
				cancel()
				if err == nil {
					f.log.Info("removed from the raft configuration")
					return true
				}
				f.log.Debug("leave: removal not confirmed yet", "leader", views.MemberID(lead), "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(f.cfg.TickInterval * 2):
			}
		}
		return false
	}
	return err == nil
}

// mayParticipate reports whether member id may be added to the raft
// configuration: the last certificate the transport verified for it has the
// voter role. A light member's certificate, or none verified yet, keeps it
// out (it works through the leader, and is added once a voter certificate
// of it is seen).
func (f *Fleet) mayParticipate(id uint64) bool {
	r, ok := f.host.Net().PeerRole(id)
	return ok && r.Voter()
}
