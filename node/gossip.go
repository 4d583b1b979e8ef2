package node

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/node/internal/fleet"
	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// resolveID returns the raft id recorded in dir's identity file, or a new
// random non-zero one for a directory without one. The caller records it
// (checkIdentity).
func resolveID(dir string) (uint64, error) {
	ident, ok, err := readIdentity(dir)
	if err != nil || ok {
		return ident.id, err
	}
	var buf [8]byte
	for {
		if _, err := rand.Read(buf[:]); err != nil {
			return 0, err
		}
		if id := binary.BigEndian.Uint64(buf[:]); id != 0 {
			return id, nil
		}
	}
}

// gossipState is the loop-owned part of the gossip integration.
type gossipState struct {
	pending *pendingChange
	// since: each member's health mark, kept by this node while it leads in
	// sinceTerm. A node that leads again in a later term starts afresh: a
	// mark from its earlier term says nothing of the time between, and kept
	// it would make a member killed just now look failed since then (and be
	// replaced before DeadVoterAfter).
	since     map[uint64]healthMark
	sinceTerm uint64
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

// healthMark is when a member's health last changed. A change of role
// (outside, learner, voter) restarts the clock, so a member is stable for
// StabilizeFor in its current role before the next step.
type healthMark struct {
	healthy bool
	role    int
	since   time.Time
}

// startGossip starts the membership member and its helper goroutine. Called
// by Start before the loop runs.
func (n *Node) startGossip() error {
	g := fleet.WithDefaults(*n.cfg.Gossip)
	n.gcfg = g
	n.gevents = make(chan membership.Event, 1024)
	n.loop.gossip.since = map[uint64]healthMark{}
	n.loop.gossip.removed = map[uint64]bool{}
	n.loop.gossip.leaveWait = map[uint64][]chan error{}
	n.loop.gossip.foreign = map[uint64]bool{}
	mc := g
	mc.Name = n.gossipName()
	mc.AdvertiseAddr = n.cfg.gossipAdvertiseHost(g)
	mc.Meta = n.localMeta()
	mc.Logger = n.log
	mc.Events = n.gevents
	m, err := membership.Start(mc)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	n.ml = m
	n.bgwg.Add(1)
	go n.gossipLoop()
	return nil
}

func (n *Node) localMeta() membership.Meta {
	return membership.Meta{RaftID: n.id, RaftAddr: n.addr, ClusterID: n.cfg.ClusterID, Version: n.cfg.version(),
		HasData: n.storage.HasState(), Formation: n.formation()}
}

// GossipAddr is the address other members use as a seed ("" without gossip).
func (n *Node) GossipAddr() string {
	if n.ml == nil {
		return ""
	}
	return n.ml.Local().Addr
}

// Members is the gossip view of the cluster (nil without gossip).
func (n *Node) Members() []membership.Member {
	if n.ml == nil {
		return nil
	}
	return n.ml.Members()
}

// ConfState returns the node's current raft configuration (voters and
// learners), as last applied.
func (n *Node) ConfState(ctx context.Context) (voters, learners []uint64, err error) {
	// The loop answers on a channel: if ctx ends first, it must not write
	// into this call's results after it returned.
	done := make(chan [2][]uint64, 1)
	if err := n.do(ctx, func() {
		var out [2][]uint64
		if cs := n.loop.confState; cs != nil {
			out = [2][]uint64{slices.Clone(cs.GetVoters()), slices.Clone(cs.GetLearners())}
		}
		done <- out
	}); err != nil {
		return nil, nil, err
	}
	select {
	case out := <-done:
		voters, learners = out[0], out[1]
	case <-ctx.Done():
		return nil, nil, context.Cause(ctx)
	case <-n.donec:
		return nil, nil, ErrClosed
	}
	slices.Sort(voters)
	slices.Sort(learners)
	return voters, learners, nil
}

// settledSlowdown: how much slower a settled member's gossip goroutine
// ticks (gossipLoop).
const settledSlowdown = 5

// gossipLoop forwards membership to the transport, forms the cluster, marks
// HasData once raft state exists, and wakes the leader's reconcile step.
func (n *Node) gossipLoop() {
	defer n.bgwg.Done()
	// Two tickers, aligned with the node's others (clock.go): tick drives
	// formation and metadata announcements, recon the leader's reconcile
	// step (and a periodic re-sync of the transport's peers). Once this
	// member is settled (bound to a formation, no longer seeding) its
	// metadata changes only if it gets raft data (a light member made a
	// learner), which nothing waits for, and only a leader reconciles: both
	// then slow down to settledSlowdown times their period, so a settled
	// member's gossip goroutine wakes every 5 s instead of every second.
	var tickP, reconP time.Duration
	var tick, recon <-chan time.Time
	stopTick, stopRecon := func() {}, func() {}
	defer func() { stopTick(); stopRecon() }()
	retime := func(settled bool) {
		t, r := n.gcfg.Timing.ProbeInterval, n.gcfg.ReconcileEvery
		if settled {
			t *= settledSlowdown
		}
		if settled && n.lead.Load() != n.id {
			r *= settledSlowdown
		}
		if t != tickP {
			stopTick()
			tick, stopTick = alignedTicker(t)
			tickP = t
		}
		if r != reconP {
			stopRecon()
			recon, stopRecon = alignedTicker(r)
			reconP = r
		}
	}
	retime(false)
	announced := n.localMeta()
	seeding := true // membership re-resolves the seeds until the cluster is formed with this member in it
	var view, waitLogged string
	viewSince := time.Now()
	n.syncPeers()
	for {
		epoch := n.leaderEpoch() // a new leader retimes recon at once
		select {
		case <-n.stopc:
			return
		case <-epoch:
		case <-n.gevents:
			// Events are only a wake-up: Members() is the truth.
			for drained := false; !drained; {
				select {
				case <-n.gevents:
				default:
					drained = true
				}
			}
			n.syncPeers()
			n.tryDo(n.reconcile)
		case <-recon:
			n.syncPeers()
			if n.lead.Load() == n.id {
				// Only a leader reconciles: elsewhere the hop into the loop
				// would be a wake-up a second for nothing.
				n.tryDo(n.reconcile)
			}
		case <-tick:
		}
		// A closing node stops here, whichever other case was also ready:
		// select picks among ready cases at random, and each further turn
		// could start a metadata broadcast that nothing will send.
		select {
		case <-n.stopc:
			return
		default:
		}
		meta := n.localMeta()
		if meta != announced {
			// Raft data or a formation id: tell the others.
			if err := n.ml.UpdateMeta(meta); err != nil && n.closing.Load() {
				n.log.Debug("gossip: could not announce metadata while closing", "err", err)
			} else if err != nil {
				n.log.Warn("gossip: could not announce metadata", "err", err)
			} else {
				announced = meta
			}
		}
		if seeding && (announced.HasData || slices.ContainsFunc(n.ml.Members(), func(m membership.Member) bool {
			return m.State == membership.StateAlive && m.Meta.HasData && m.Meta.RaftID != n.id
		})) {
			n.ml.StopSeeding()
			seeding = false
		}
		retime(!seeding && announced.Formation != "" && meta == announced)
		if announced.HasData {
			continue
		}
		members := n.ml.Members()
		n.adoptLeadersFormation(members)
		if v := viewKey(members); v != view {
			view, viewSince = v, time.Now()
			continue
		}
		if time.Since(viewSince) < n.gcfg.SettleFor {
			continue
		}
		plan := membership.PlanFormation(n.gossipName(), n.localMeta(), n.founders(), members)
		if !plan.Candidate {
			continue
		}
		var err error
		if plan.Ready {
			err = n.formCluster(plan)
		} else {
			err = errors.New(plan.Wait)
		}
		if err == nil {
			n.log.Info("formed the cluster", "formation", n.formation(), "founders", n.founders())
		} else if msg := err.Error(); msg != waitLogged {
			// Once per reason: waiting for founders is normal at first.
			waitLogged = msg
			n.log.Info("formation: waiting", "reason", msg)
		}
	}
}

// adoptLeadersFormation binds a light member (no raft data, a session
// opened by a leader) to the formed cluster of that leader, as a learner is
// bound by its first raft traffic: from then on it only talks to that
// cluster. Runs on the gossip goroutine.
func (n *Node) adoptLeadersFormation(members []membership.Member) {
	if n.formation() != "" || n.sess.Load() == 0 || n.storage.HasState() {
		return
	}
	lead := n.lead.Load()
	for _, m := range members {
		if m.Meta.RaftID == lead && lead != 0 && m.Meta.Formation != "" {
			if err := n.joinFormation(m.Meta.Formation); err != nil {
				n.log.Debug("formation: light member not bound", "err", err)
			}
			return
		}
	}
}

func viewKey(members []membership.Member) string {
	var b strings.Builder
	for _, m := range members {
		fmt.Fprintf(&b, "%x/%d/%t/%s;", m.Meta.RaftID, m.State, m.Meta.HasData, m.Meta.Formation)
	}
	return b.String()
}

// syncPeers makes every alive member's gRPC address known to the transport,
// and the members with raft data allowed to send raft messages (members.go).
func (n *Node) syncPeers() {
	var withData []uint64
	for _, m := range n.ml.Members() {
		if m.State == membership.StateAlive && m.Meta.RaftID != n.id {
			n.tr.AddPeer(m.Meta.RaftID, m.Meta.RaftAddr)
		}
		if m.Meta.HasData && m.Meta.RaftID != n.id {
			withData = append(withData, m.Meta.RaftID)
		}
	}
	n.members.setGossip(withData)
}

// bootstrapRaft forms the cluster with voters. Runs in the loop; refuses if
// raft already has state (it was contacted by a leader meanwhile).
func (n *Node) bootstrapRaft(voters []membership.Member) error {
	if n.storage.HasState() || n.rn.BasicStatus().GetTerm() > 0 {
		return errors.New("raft already has state")
	}
	peers := make([]raft.Peer, 0, len(voters))
	ids := make([]uint64, 0, len(voters))
	for _, v := range voters {
		peers = append(peers, raft.Peer{ID: v.Meta.RaftID, Context: []byte(v.Meta.RaftAddr)})
		ids = append(ids, v.Meta.RaftID)
		if v.Meta.RaftID != n.id {
			n.tr.AddPeer(v.Meta.RaftID, v.Meta.RaftAddr)
		}
	}
	n.members.addFounders(ids)
	if err := n.rn.Bootstrap(peers); err != nil {
		return err
	}
	n.log.Info("bootstrapped new cluster from gossip", "voters", ids, "cluster", n.cfg.ClusterID, "formation", n.formation())
	return nil
}

// onConfChangeApplied keeps the transport and the reconcile state in step
// with an applied configuration change. Runs in the loop.
func (n *Node) onConfChangeApplied(cc raftpb.ConfChangeI) {
	v2 := cc.AsV2()
	for _, ch := range v2.GetChanges() {
		id := ch.GetNodeId()
		switch ch.GetType() {
		case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
			if addr := string(v2.GetContext()); addr != "" && id != n.id {
				n.tr.AddPeer(id, addr)
			}
		case raftpb.ConfChangeRemoveNode:
			n.members.remove(id)
			// A member that left (Leave), in either mode, waits for this.
			for _, w := range n.loop.gossip.leaveWait[id] {
				w <- nil
			}
			delete(n.loop.gossip.leaveWait, id)
			if n.cfg.Gossip == nil {
				continue
			}
			n.loop.gossip.removed[id] = true
			if id == n.id {
				n.log.Info("this node was removed from the raft configuration")
			}
		}
	}
	if n.cfg.Gossip != nil && n.loop.gossip.pending != nil {
		n.loop.gossip.pending = nil
		n.tryDo(n.reconcile) // the next step, without waiting a round
	}
}

// reconcile is the leader's membership step: at most one configuration
// change per call, and none while the previous one is pending. It runs only
// once the leader is active (the first entry of its term applied, so every
// configuration change committed before its term is applied here): a new
// leader's configuration may lack a change an earlier leader committed.
func (n *Node) reconcile() {
	if n.ml == nil || !n.loop.isLeader || !n.loop.lead.active || n.err() != nil || n.closing.Load() {
		return
	}
	now := time.Now()
	gs := &n.loop.gossip
	if t := n.loop.lead.term; gs.sinceTerm != t {
		gs.since, gs.sinceTerm = map[uint64]healthMark{}, t
	}
	if p := gs.pending; p != nil {
		if now.Sub(p.at) < 5*n.cfg.electionTimeout() {
			return
		}
		n.log.Warn("gossip: configuration change not applied in time; planning again", "change", p.kind.String(), "id", p.id)
		gs.pending = nil
	}
	cs := n.loop.confState
	if cs == nil || len(cs.GetVotersOutgoing()) > 0 {
		return
	}
	st := n.rn.Status()
	in := membership.PlanInput{
		LeaderID:   n.id,
		Voters:     cs.GetVoters(),
		Learners:   cs.GetLearners(),
		LastIndex:  st.Progress[n.id].Match,
		Thresholds: n.gcfg.Thresholds,
	}
	maxLag := n.gcfg.Thresholds.MaxLag
	if maxLag == 0 {
		maxLag = membership.DefaultThresholds().MaxLag
	}
	for id := range gs.removed {
		in.Removed = append(in.Removed, id)
	}
	type info struct {
		state membership.State
		meta  membership.Meta
	}
	seen := map[uint64]info{}
	own := n.formation()
	for _, m := range n.ml.Members() {
		if m.Meta.Formation != "" && m.Meta.Formation != own {
			// A member of another formed cluster: never added, removed or
			// told anything. For this cluster it is not there.
			if !gs.foreign[m.Meta.RaftID] {
				gs.foreign[m.Meta.RaftID] = true
				n.log.Warn("gossip: member belongs to another formed cluster with the same ClusterID; ignoring it",
					"member", m.Name, "id", m.Meta.RaftID, "its_formation", m.Meta.Formation, "formation", own)
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
		if inf.state == membership.StateAlive && inf.meta.HasData && id != n.id && inf.meta.Formation == own && !inConf {
			outside = append(outside, id)
		} else if inf.state == membership.StateAlive && gs.removed[id] && id != n.id && !inConf &&
			(inf.meta.Formation == own || inf.meta.Formation == "") {
			// An id removed from this configuration (a learner removed
			// before it had raft data, say) is never added again
			// (membership.PlanInput.Removed): without being told it would
			// stay a light member of a removed id for ever. Told, it stops
			// with ErrRemoved and comes back with a fresh data directory.
			outside = append(outside, id)
		}
	}
	n.confirmRemoved(outside, now)
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
		h := membership.MemberHealth{RaftID: id, Gossip: inf.state, HasData: inf.meta.HasData}
		healthy := inf.state == membership.StateAlive
		role := 0
		if inConfig {
			h.RecentActive, h.Match = pr.RecentActive, pr.Match
			if id == n.id {
				h.RecentActive = true
			}
			// Match 0: nothing replicated yet, however short the log.
			healthy = healthy && h.RecentActive && pr.Match > 0 && in.LastIndex-min(pr.Match, in.LastIndex) <= maxLag
			role = 1
			if !pr.IsLearner {
				role = 2
			}
		}
		mark, ok := gs.since[id]
		if !ok || mark.healthy != healthy || mark.role != role {
			mark = healthMark{healthy: healthy, role: role, since: now}
			gs.since[id] = mark
		}
		if healthy {
			h.HealthyFor = now.Sub(mark.since)
		} else {
			h.UnhealthyFor = now.Sub(mark.since)
		}
		in.Members = append(in.Members, h)
	}
	for id := range gs.since {
		if !ids[id] {
			delete(gs.since, id)
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
	n.flushProposals() // commands of this turn keep their place before the change
	if err := n.rn.ProposeConfChange(cc); err != nil {
		n.log.Warn("gossip: propose configuration change", "change", plan.Change.String(), "id", plan.RaftID, "err", err)
		return
	}
	gs.pending = &pendingChange{kind: plan.Change, id: plan.RaftID, at: now}
	n.log.Info("gossip: configuration change proposed", "change", plan.Change.String(), "id", plan.RaftID, "reason", plan.Reason)
}

// handleLeave serves a member's request to be removed from the configuration
// for good (its Leave), in gossip or static mode: the leader proposes the
// removal of the caller (never of anyone else) and answers once it is
// applied here.
func (n *Node) handleLeave(ctx context.Context, from uint64) error {
	res := make(chan error, 1)
	if err := n.do(ctx, func() { n.proposeRemoval(from, res) }); err != nil {
		return err
	}
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-n.donec:
		return ErrClosed
	}
}

// proposeRemoval runs in the loop on the leader. res gets nil once id is out
// of the applied configuration.
func (n *Node) proposeRemoval(id uint64, res chan error) {
	if !n.loop.isLeader {
		res <- ErrUnavailable
		return
	}
	cs := n.loop.confState
	if !slices.Contains(cs.GetVoters(), id) && !slices.Contains(cs.GetLearners(), id) {
		res <- nil
		return
	}
	gs := &n.loop.gossip
	if gs.pending == nil || gs.pending.id != id || gs.pending.kind != membership.RemoveVoter {
		if gs.pending != nil && time.Since(gs.pending.at) < 5*n.cfg.electionTimeout() {
			res <- ErrUnavailable // another change in flight; the caller retries
			return
		}
		cc := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: new(id)}}}
		n.flushProposals()
		if err := n.rn.ProposeConfChange(cc); err != nil {
			res <- err
			return
		}
		gs.pending = &pendingChange{kind: membership.RemoveVoter, id: id, at: time.Now()}
		n.log.Info("gossip: removing a leaving member", "id", id)
	}
	if gs.leaveWait == nil {
		gs.leaveWait = map[uint64][]chan error{} // static mode: startGossip never ran
	}
	if gs.left == nil {
		gs.left = map[uint64]bool{}
	}
	gs.left[id] = true // its "you were removed" notice is then routine
	gs.leaveWait[id] = append(gs.leaveWait[id], res)
}

// leaveCluster removes this node from the raft configuration through the
// leader (after leadership was handed over), for Leave. Bounded by ctx;
// false if the removal was not confirmed.
func (n *Node) leaveCluster(ctx context.Context) bool {
	voters, learners, err := n.ConfState(ctx)
	inConfig := err == nil && (slices.Contains(voters, n.id) || slices.Contains(learners, n.id))
	if inConfig && !(len(voters) == 1 && voters[0] == n.id) {
		for ctx.Err() == nil {
			lead := n.Leader()
			if lead != 0 && lead != n.id {
				cctx, cancel := context.WithTimeout(ctx, 2*n.cfg.electionTimeout())
				_, err := n.tr.Leave(cctx, lead, &transportpb.LeaveRequest{})
				cancel()
				if err == nil {
					n.log.Info("removed from the raft configuration")
					return true
				}
				n.log.Debug("leave: removal not confirmed yet", "leader", lead, "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(n.cfg.TickInterval * 2):
			}
		}
		return false
	}
	return err == nil
}

// leaveGossip announces a departure for good to gossip (Leave, even when
// the graceful raft part failed).
func (n *Node) leaveGossip() {
	if err := n.ml.Leave(n.gcfg.Timing.TCPTimeout); err != nil {
		n.log.Info("leave gossip: not confirmed; the others will see this member fail instead", "err", err)
	}
}

// tellRemoved notifies a live member that has raft state but is not in the
// configuration. New members join with no state and are added as learners
// before they receive any, so such a member was removed (typically while it
// was down past the threshold) and came back with a stale log: without the
// notice it would campaign forever and its Lock calls would wait forever.
// Runs in the loop; the call itself runs on its own goroutine. At most one
// notice per member every 10 s.
func (n *Node) tellRemoved(id uint64, now time.Time) {
	gs := &n.loop.gossip
	if gs.told == nil {
		gs.told = map[uint64]time.Time{}
	}
	if at, ok := gs.told[id]; ok && now.Sub(at) < 10*time.Second {
		return
	}
	gs.told[id] = now
	if gs.left[id] {
		n.log.Info("gossip: a member that left still runs; telling it it was removed", "id", id)
	} else {
		n.log.Warn("gossip: member has raft state but is not in the configuration; telling it it was removed", "id", id)
	}
	cs := n.loop.confState
	req := &transportpb.RemovedRequest{Term: n.rn.BasicStatus().GetTerm(), Applied: n.loop.lastApplied,
		Voters: slices.Clone(cs.GetVoters()), Learners: slices.Clone(cs.GetLearners())}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.electionTimeout())
		defer cancel()
		if _, err := n.tr.Removed(ctx, id, req); err != nil {
			n.log.Debug("gossip: removed notice not delivered", "id", id, "err", err)
		}
	}()
}

func inConf(cs *raftpb.ConfState, id uint64) bool {
	return slices.Contains(cs.GetVoters(), id) || slices.Contains(cs.GetLearners(), id) ||
		slices.Contains(cs.GetVotersOutgoing(), id)
}

// judgeRemoved decides whether to believe a notice that this node was
// removed (loop): it stops for good, so the notice must come from the leader
// this node follows or, if it follows none (a removed member campaigns in
// vain), from a voter it knows or gossip reports with raft data; the
// configuration the notice was judged from must not list it and must be
// newer than this node's, unless this node's own already lacks it. nil
// means it was believed and the node stops.
func (n *Node) judgeRemoved(from uint64, req *transportpb.RemovedRequest) error {
	st := n.rn.BasicStatus()
	if err := removedVerdict(removedView{self: n.id, term: st.GetTerm(), lead: st.Lead, applied: n.loop.lastApplied,
		conf: n.loop.confState, known: n.members.allows}, from, req); err != nil {
		return err
	}
	if n.closing.Load() {
		// Leave asked for it: the expected end, not an incident.
		n.log.Info("removed from the cluster as Leave asked; stopping", "told_by", from)
	} else {
		// One ERROR line for this event: stopServing's, with ErrRemoved.
		n.log.Info("removed from the cluster while away: stopping", "told_by", from)
	}
	n.loop.stopWith = ErrRemoved
	return nil
}

// removedView is what a node judges a removed notice against.
type removedView struct {
	self, term, lead, applied uint64
	conf                      *raftpb.ConfState
	known                     func(uint64) bool // members with raft data (members.go)
}

// removedVerdict is judgeRemoved's rule (pure; FuzzRemovedRequest): nil
// means believe the notice.
func removedVerdict(v removedView, from uint64, req *transportpb.RemovedRequest) error {
	denied := func(format string, a ...any) error {
		return fmt.Errorf("%w: removed notice from %d: %s", transport.ErrPermissionDenied, from, fmt.Sprintf(format, a...))
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
		return denied("this node follows %d", v.lead)
	case v.lead == 0 && !slices.Contains(v.conf.GetVoters(), from) && !v.known(from):
		return denied("not a voter or member known here")
	}
	return nil
}

// ErrNoGossip is returned by the gossip key methods of a node without gossip.
var ErrNoGossip = errors.New("lockraft: gossip is not configured")

// AddGossipKey, UseGossipKey and RemoveGossipKey rotate this member's gossip
// keys at run time (membership.Membership.AddKey, UseKey, RemoveKey): add the
// new key on every member, then make it the primary on every member, then
// remove the old one everywhere. A member started without keys cannot start
// encrypting at run time.
func (n *Node) AddGossipKey(key []byte) error {
	return n.gossipKey(key, (*membership.Membership).AddKey)
}

// UseGossipKey: see AddGossipKey.
func (n *Node) UseGossipKey(key []byte) error {
	return n.gossipKey(key, (*membership.Membership).UseKey)
}

// RemoveGossipKey: see AddGossipKey.
func (n *Node) RemoveGossipKey(key []byte) error {
	return n.gossipKey(key, (*membership.Membership).RemoveKey)
}

func (n *Node) gossipKey(key []byte, f func(*membership.Membership, []byte) error) error {
	if n.ml == nil {
		return ErrNoGossip
	}
	if err := f(n.ml, key); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	return nil
}
