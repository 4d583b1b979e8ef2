package node

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/membership"
)

// GossipConfig turns on gossip membership (package membership): the node
// finds the others through Seeds, the cluster forms once BootstrapExpect
// members are seen, and the leader grows and heals the voter set by itself.
// It is used only when Config.Members is empty.
type GossipConfig struct {
	// Seeds are gossip addresses ("host:port") of some other members. Empty
	// for the first member of a fleet.
	Seeds []string

	// BindAddr and BindPort are where gossip listens (UDP and TCP). Default
	// 127.0.0.1 and a free port. AdvertiseAddr/AdvertisePort: what others
	// dial, default the bound ones.
	BindAddr      string
	BindPort      int
	AdvertiseAddr string
	AdvertisePort int

	// BootstrapExpect is how many members must be seen before the cluster is
	// formed (default 3). 1 is the explicit single-node development mode.
	BootstrapExpect int

	// SecretKey (16, 24 or 32 bytes) encrypts and authenticates gossip.
	SecretKey []byte

	// Timing of the failure detector; zero means membership.LANTiming().
	// Tests use membership.FastTiming().
	Timing membership.Timing

	// Thresholds tune the leader's voter policy (membership.PlanVoters).
	Thresholds membership.Thresholds

	// SettleFor: the gossip view must be unchanged this long before a
	// bootstrap decision (default 3 probe intervals).
	SettleFor time.Duration

	// ReconcileEvery: how often the leader reconsiders the configuration
	// (default 1 s; also on every membership event).
	ReconcileEvery time.Duration
}

const methodLeave = "leave"

// methodRemoved tells a member with raft state that is not in the
// configuration that it was removed (see tellRemoved).
const methodRemoved = "removed"

func (g *GossipConfig) withDefaults() GossipConfig {
	c := *g
	if c.BindAddr == "" {
		c.BindAddr = "127.0.0.1"
	}
	if c.BootstrapExpect == 0 {
		c.BootstrapExpect = 3
	}
	if c.Timing == (membership.Timing{}) {
		c.Timing = membership.LANTiming()
	}
	if c.SettleFor == 0 {
		c.SettleFor = 3 * c.Timing.ProbeInterval
	}
	if c.ReconcileEvery == 0 {
		c.ReconcileEvery = time.Second
	}
	return c
}

func (g *GossipConfig) validate() error {
	if g.BootstrapExpect < 0 {
		return fmt.Errorf("%w: Gossip.BootstrapExpect %d is negative", ErrInvalidConfig, g.BootstrapExpect)
	}
	switch len(g.SecretKey) {
	case 0, 16, 24, 32:
	default:
		return fmt.Errorf("%w: Gossip.SecretKey is %d bytes, want 16, 24 or 32", ErrInvalidConfig, len(g.SecretKey))
	}
	return nil
}

// resolveID returns the raft id recorded in dir's identity file, or a new
// random non-zero one for a directory without one. The caller records it
// (checkIdentity).
func resolveID(dir string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(dir, identityFile))
	if errors.Is(err, fs.ErrNotExist) {
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
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "id="); ok {
			id, err := strconv.ParseUint(v, 10, 64)
			if err != nil || id == 0 {
				return 0, fmt.Errorf("%w: %s: bad id %q", ErrDataDir, dir, v)
			}
			return id, nil
		}
	}
	return 0, fmt.Errorf("%w: %s: identity file has no id", ErrDataDir, dir)
}

// gossipState is the loop-owned part of the gossip integration.
type gossipState struct {
	pending   *pendingChange
	since     map[uint64]healthMark
	removed   map[uint64]bool
	leaveWait map[uint64][]chan error // raft id -> Leave calls waiting for its removal
	told      map[uint64]time.Time    // last "removed" notice sent, by raft id
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
	g := n.cfg.Gossip.withDefaults()
	n.gcfg = g
	n.gevents = make(chan membership.Event, 1024)
	n.loop.gossip.since = map[uint64]healthMark{}
	n.loop.gossip.removed = map[uint64]bool{}
	n.loop.gossip.leaveWait = map[uint64][]chan error{}
	m, err := membership.Start(membership.Config{
		BindAddr:      g.BindAddr,
		BindPort:      g.BindPort,
		AdvertiseAddr: g.AdvertiseAddr,
		AdvertisePort: g.AdvertisePort,
		Seeds:         g.Seeds,
		Meta:          n.localMeta(),
		SecretKey:     g.SecretKey,
		Timing:        g.Timing,
		Logger:        n.log,
		Events:        n.gevents,
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	n.ml = m
	n.bgwg.Add(1)
	go n.gossipLoop()
	return nil
}

func (n *Node) localMeta() membership.Meta {
	return membership.Meta{RaftID: n.id, RaftAddr: n.tr.Addr(), ClusterID: n.cfg.ClusterID, Version: n.cfg.version(),
		HasData: n.storage.HasState()}
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
	done := make(chan struct{})
	if err := n.do(ctx, func() {
		if cs := n.loop.confState; cs != nil {
			voters, learners = slices.Clone(cs.GetVoters()), slices.Clone(cs.GetLearners())
		}
		close(done)
	}); err != nil {
		return nil, nil, err
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, nil, context.Cause(ctx)
	case <-n.donec:
		return nil, nil, ErrClosed
	}
	slices.Sort(voters)
	slices.Sort(learners)
	return voters, learners, nil
}

// gossipLoop forwards membership to the transport, forms the cluster, marks
// HasData once raft state exists, and wakes the leader's reconcile step.
func (n *Node) gossipLoop() {
	defer n.bgwg.Done()
	tick := time.NewTicker(n.gcfg.Timing.ProbeInterval)
	defer tick.Stop()
	recon := time.NewTicker(n.gcfg.ReconcileEvery)
	defer recon.Stop()
	hasData := n.storage.HasState()
	var view string
	viewSince := time.Now()
	n.syncPeers()
	for {
		select {
		case <-n.stopc:
			return
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
		case <-recon.C:
			n.syncPeers()
			n.tryDo(n.reconcile)
		case <-tick.C:
		}
		if !hasData && n.storage.HasState() {
			hasData = true
			if err := n.ml.UpdateMeta(n.localMeta()); err != nil {
				n.log.Warn("gossip: could not announce raft data", "err", err)
			}
		}
		if hasData {
			continue
		}
		members := n.ml.Members()
		if v := viewKey(members); v != view {
			view, viewSince = v, time.Now()
			continue
		}
		if time.Since(viewSince) < n.gcfg.SettleFor {
			continue
		}
		ok, voters := membership.ShouldBootstrap(n.localMeta(), members, n.gcfg.BootstrapExpect)
		if !ok {
			continue
		}
		res := make(chan error, 1)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if n.do(ctx, func() { res <- n.bootstrapRaft(voters) }) == nil {
			select {
			case err := <-res:
				if err != nil {
					n.log.Warn("gossip: bootstrap skipped", "err", err)
				}
			case <-n.stopc:
			}
		}
		cancel()
	}
}

func viewKey(members []membership.Member) string {
	var b strings.Builder
	for _, m := range members {
		fmt.Fprintf(&b, "%x/%d/%t;", m.Meta.RaftID, m.State, m.Meta.HasData)
	}
	return b.String()
}

// syncPeers makes every alive member's gRPC address known to the transport.
func (n *Node) syncPeers() {
	for _, m := range n.ml.Members() {
		if m.State == membership.StateAlive && m.Meta.RaftID != n.id {
			n.tr.AddPeer(m.Meta.RaftID, m.Meta.RaftAddr)
		}
	}
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
	if err := n.rn.Bootstrap(peers); err != nil {
		return err
	}
	n.log.Info("bootstrapped new cluster from gossip", "voters", ids, "cluster", n.cfg.ClusterID)
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
			if n.cfg.Gossip == nil {
				continue
			}
			n.loop.gossip.removed[id] = true
			if id == n.id {
				n.log.Info("this node was removed from the raft configuration")
			}
			for _, w := range n.loop.gossip.leaveWait[id] {
				w <- nil
			}
			delete(n.loop.gossip.leaveWait, id)
		}
	}
	if n.cfg.Gossip != nil && n.loop.gossip.pending != nil {
		n.loop.gossip.pending = nil
		n.tryDo(n.reconcile) // the next step, without waiting a round
	}
}

// reconcile is the leader's membership step: at most one configuration
// change per call, and none while the previous one is pending.
func (n *Node) reconcile() {
	if n.ml == nil || !n.loop.isLeader || n.err() != nil || n.closing.Load() {
		return
	}
	now := time.Now()
	gs := &n.loop.gossip
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
	for _, m := range n.ml.Members() {
		if old, ok := seen[m.Meta.RaftID]; ok && old.state == membership.StateAlive {
			continue
		}
		seen[m.Meta.RaftID] = info{m.State, m.Meta}
	}
	for id, inf := range seen {
		if inf.state == membership.StateAlive && inf.meta.HasData && id != n.id &&
			!slices.Contains(cs.GetVoters(), id) && !slices.Contains(cs.GetLearners(), id) {
			n.tellRemoved(id, now)
		}
	}
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
// (its graceful Close): the leader proposes the removal and answers once it
// is applied here.
func (n *Node) handleLeave(ctx context.Context, from uint64) ([]byte, error) {
	res := make(chan error, 1)
	if err := n.do(ctx, func() { n.proposeRemoval(from, res) }); err != nil {
		return nil, err
	}
	select {
	case err := <-res:
		if err != nil {
			return nil, err
		}
		return []byte{1}, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-n.donec:
		return nil, ErrClosed
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
	gs.leaveWait[id] = append(gs.leaveWait[id], res)
}

// leaveCluster removes this node from the raft configuration through the
// leader (after leadership was handed over). Bounded by ctx; best effort.
func (n *Node) leaveCluster(ctx context.Context) {
	if n.ml == nil {
		return
	}
	voters, learners, err := n.ConfState(ctx)
	inConfig := err == nil && (slices.Contains(voters, n.id) || slices.Contains(learners, n.id))
	if inConfig && !(len(voters) == 1 && voters[0] == n.id) {
		for ctx.Err() == nil {
			lead := n.Leader()
			if lead != 0 && lead != n.id {
				cctx, cancel := context.WithTimeout(ctx, 2*n.cfg.electionTimeout())
				_, err := n.tr.Call(cctx, lead, methodLeave, nil)
				cancel()
				if err == nil {
					n.log.Info("removed from the raft configuration")
					break
				}
				n.log.Debug("leave: removal not confirmed yet", "leader", lead, "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(n.cfg.TickInterval * 2):
			}
		}
	}
}

// leaveGossip announces a graceful departure to gossip (Close, even when the
// graceful raft part failed).
func (n *Node) leaveGossip() {
	if err := n.ml.Leave(n.gcfg.Timing.TCPTimeout); err != nil {
		n.log.Warn("leave gossip", "err", err)
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
	n.log.Warn("gossip: member has raft state but is not in the configuration; telling it it was removed", "id", id)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.electionTimeout())
		defer cancel()
		if _, err := n.tr.Call(ctx, id, methodRemoved, nil); err != nil {
			n.log.Debug("gossip: removed notice not delivered", "id", id, "err", err)
		}
	}()
}

// handleRemoved stops this node: the leader says it is not a member.
func (n *Node) handleRemoved(from uint64) ([]byte, error) {
	n.log.Error("removed from the cluster while away: stopping; start with a fresh data directory to rejoin",
		"told_by", from, "id", n.id)
	n.tryDo(func() { n.loop.stopWith = ErrRemoved })
	return nil, nil
}
