package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/lockraft/lockraft/internal/cluster"
	"github.com/lockraft/lockraft/internal/knobs"
	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/node"
)

// FaultChurn: membership changes under traffic with gossip-mode nodes (the
// leader grows and heals the voter set by itself): kill a voter and leave it
// dead (it is replaced after DeadVoterAfter), kill and restart from disk,
// add new members, close members (graceful leave).
const FaultChurn = "churn"

// FaultChurnLight is churn in a fleet that keeps 3 voters and 1 standby, so
// that up to two of its members are light (outside the raft configuration:
// their sessions kept alive by keepalives to the leader, their commands
// forwarded): the same changes, which also kill, restart, add and close
// light members, and promote one when a voter dies.
const FaultChurnLight = "churn-light"

// churnLightThresholds is the voter policy of FaultChurnLight.
func churnLightThresholds() membership.Thresholds {
	t := ChurnThresholds()
	t.MaxVoters, t.MaxLearners = 3, 1
	return t
}

// churnFounders are the gossip names of the slots that form the fleet.
var churnFounders = []string{"slot-1", "slot-2", "slot-3"}

// ChurnThresholds are the short voter-policy thresholds churn runs with.
func ChurnThresholds() membership.Thresholds {
	return membership.Thresholds{StabilizeFor: 300 * time.Millisecond, DeadVoterAfter: 1500 * time.Millisecond,
		DeadLearnerAfter: time.Second}
}

// GossipCluster is a fleet of gossip-mode nodes in slots 1..Slots of the
// cluster harness. A slot holds at most one running node; a slot restarted
// "fresh" gets a new data directory, i.e. a new member with a new raft id.
type GossipCluster struct {
	*cluster.Cluster[*node.Node]
	Applied *AppliedLog
	logf    func(string, ...any)

	policy membership.Thresholds // every member's voter policy
	plant  func(*knobs.Node)     // planted bugs, on every member (nil: none)

	mu     sync.Mutex
	fresh  map[uint64]bool   // the slot's next start is fresh (its member left for good)
	raftID map[uint64]uint64 // slot -> raft id of its current data dir
	light  map[uint64]bool   // raft ids seen running outside a full configuration (light members)
}

// NewGossipCluster starts `initial` members in a fleet of `slots` slots.
// Slot s is named "slot-<s>" in gossip, as a StatefulSet names its pods; the
// founders are slots 1 to 3 (so initial must be at least 3 for the fleet to
// form). A founder slot restarted fresh keeps its name, as a pod whose
// volume was replaced does.
func NewGossipCluster(base string, initial, slots int, policy membership.Thresholds, logger *slog.Logger, logf func(string, ...any)) (*GossipCluster, error) {
	return newGossipCluster(base, initial, slots, policy, nil, logger, logf)
}

// newGossipCluster is NewGossipCluster with bugs planted on every member.
func newGossipCluster(base string, initial, slots int, policy membership.Thresholds, plant func(*knobs.Node), logger *slog.Logger,
	logf func(string, ...any)) (*GossipCluster, error) {
	c := &GossipCluster{Applied: NewAppliedLog(), logf: logf, policy: policy, plant: plant, fresh: map[uint64]bool{},
		raftID: map[uint64]uint64{}, light: map[uint64]bool{}}
	cl, err := cluster.Start(cluster.Options[*node.Node]{Size: slots, Initial: initial, Dir: base, Gossip: true,
		Logger: logger, Start: c.startSlot})
	if err != nil {
		return nil, err
	}
	c.Cluster = cl
	return c, nil
}

func (c *GossipCluster) startSlot(s cluster.Spec) (*node.Node, error) {
	slot, inc := s.ID, s.Incarnation
	cfg := node.Config{
		ClusterID: "churn", DataDir: s.Dir, Clock: s.Clock,
		Logger:   s.Logger.With("slot", slot),
		Observer: func(r node.ApplyRecord) { c.Applied.Observe(slot, inc, r) },
		Gossip: &node.GossipConfig{Seeds: s.Seeds, Name: fmt.Sprintf("slot-%d", slot), Founders: churnFounders,
			Timing: membership.FastTiming(), Thresholds: c.policy, ReconcileEvery: 100 * time.Millisecond},
	}
	FastConfig(&cfg)
	// Snapshots on, unlike the static harness (whose end check replays the
	// whole log): members added under churn must catch up from a snapshot
	// taken before they were added (TestMemberAddedAfterSnapshotCatchesUp).
	// The checks here key the applied log by index across replicas, so a
	// replica that restores a snapshot leaves no gap in them.
	cfg.SnapshotEvery = 10000 // the default
	cfg.CompactKeep = 50
	if c.plant != nil {
		c.plant(s.Knobs)
	}
	knobs.Plant(&cfg, s.Knobs)
	n, err := node.Start(cfg)
	if err != nil {
		return nil, fmt.Errorf("start slot %d: %w", slot, err)
	}
	c.mu.Lock()
	c.raftID[slot] = n.ID()
	c.mu.Unlock()
	if c.logf != nil {
		c.logf("start slot %d (dir %s) raft id %016x", slot, s.Dir, n.ID())
	}
	return n, nil
}

// Node is the running node in a slot (nil if none).
func (c *GossipCluster) Node(slot uint64) *node.Node {
	n, ok := c.Cluster.Node(slot)
	if !ok {
		return nil
	}
	return n
}

// PauseGate: churn pauses nothing.
func (c *GossipCluster) PauseGate(uint64) <-chan struct{} { return nil }

// Start starts a node in an empty slot: from its data directory, or with a
// fresh one (a new member).
func (c *GossipCluster) Start(slot uint64, fresh bool) error {
	if !c.Crashed(slot) {
		return nil
	}
	c.mu.Lock()
	fresh = fresh || c.fresh[slot]
	delete(c.fresh, slot)
	c.mu.Unlock()
	if fresh {
		return c.StartFresh(slot)
	}
	return c.Restart(slot)
}

// forget drops a slot's data directory: its next start is fresh.
func (c *GossipCluster) forget(slot uint64) {
	c.mu.Lock()
	c.fresh[slot] = true
	c.mu.Unlock()
}

// Crash kills the node in a slot without cleanup.
func (c *GossipCluster) Crash(slot uint64) {
	if n := c.Node(slot); n != nil && c.logf != nil {
		c.logf("crash slot %d (raft id %016x)", slot, n.ID())
	}
	c.Cluster.Crash(slot)
}

// Leave takes the node in a slot away for good (node.Leave): it leaves the
// configuration. The slot's data directory is dropped (the next start there
// is fresh).
func (c *GossipCluster) Leave(ctx context.Context, slot uint64) error {
	n := c.Node(slot)
	c.Stopped(slot)
	c.forget(slot)
	if n == nil {
		return nil
	}
	if c.logf != nil {
		c.logf("leave slot %d (raft id %016x)", slot, n.ID())
	}
	return n.Leave(ctx)
}

// SlotOf returns the slot running raft id (0 if none).
func (c *GossipCluster) SlotOf(id uint64) uint64 {
	for _, s := range c.Running() {
		if n := c.Node(s); n != nil && n.ID() == id {
			return s
		}
	}
	return 0
}

// ConfState asks the running leader for its configuration.
func (c *GossipCluster) ConfState(ctx context.Context) (voters, learners []uint64, err error) {
	for _, s := range c.Running() {
		n := c.Node(s)
		if n != nil && n.Leader() == n.ID() {
			return n.ConfState(ctx)
		}
	}
	return nil, nil, fmt.Errorf("no running leader")
}

// WaitConf polls the leader's configuration until ok or ctx ends.
func (c *GossipCluster) WaitConf(ctx context.Context, ok func(voters, learners []uint64) bool) ([]uint64, []uint64, error) {
	return c.waitConf(ctx, nil, ok)
}

// waitConf is WaitConf running each (when not nil) before every poll.
func (c *GossipCluster) waitConf(ctx context.Context, each func(), ok func(voters, learners []uint64) bool) ([]uint64, []uint64, error) {
	var v, l []uint64
	for {
		if each != nil {
			each()
		}
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		vv, ll, err := c.ConfState(qctx)
		cancel()
		if err == nil {
			v, l = vv, ll
			if ok(v, l) {
				return v, l, nil
			}
		}
		select {
		case <-ctx.Done():
			return v, l, fmt.Errorf("configuration not reached (voters %016x learners %016x): %w", v, l, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WaitLeader waits until every running node agrees on a running leader.
func (c *GossipCluster) WaitLeader(ctx context.Context) (uint64, error) {
	return waitAgreedLeader(ctx, 10*time.Millisecond, c.Running, func(s uint64) (uint64, bool) {
		n := c.Node(s)
		if n == nil {
			return 0, false
		}
		return n.Leader(), true
	}, func(lead uint64) bool { return c.SlotOf(lead) != 0 })
}

// waitAgreedLeader polls, every `every`, until the nodes of ids() agree on
// a leader that valid accepts. says is whom node id says leads (0: none),
// and whether id counts (a node that is down does not).
func waitAgreedLeader(ctx context.Context, every time.Duration, ids func() []uint64,
	says func(id uint64) (lead uint64, counts bool), valid func(lead uint64) bool) (uint64, error) {
	for {
		var lead uint64
		ok := true
		for _, id := range ids() {
			l, counts := says(id)
			if !counts {
				continue
			}
			if l == 0 || (lead != 0 && l != lead) {
				ok = false
				break
			}
			lead = l
		}
		if ok && lead != 0 && valid(lead) {
			return lead, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no agreed leader: %w", ctx.Err())
		case <-time.After(every):
		}
	}
}

// churnSchedule: one membership change at a time, keeping at least three
// running members and never more than one voter down, so that a quorum of
// the configuration is always up.
func churnSchedule(ctx context.Context, c *GossipCluster, rng *rand.Rand, applied map[string]int, viol, logf func(string, ...any)) {
	dur := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	for ctx.Err() == nil {
		sleepCtx(ctx, dur(300*time.Millisecond, 1200*time.Millisecond))
		if ctx.Err() != nil {
			return
		}
		// Wait for a healthy configuration: at least 3 voters (the policy
		// grows to 5 when 5 members run), all running.
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		voters, learners, err := c.waitHealthy(wctx, applied, logf, func(v, l []uint64) bool { return healthyVoters(c, v) })
		cancel()
		if ctx.Err() != nil {
			return
		}
		c.noteLight(voters, learners)
		if err != nil {
			viol("churn: configuration did not heal: %v", err)
			return
		}
		running := c.Running()
		var empty []uint64
		for _, s := range c.IDs() {
			if !slices.Contains(running, s) {
				empty = append(empty, s)
			}
		}
		action := rng.IntN(4)
		if len(running) < 4 {
			action = 0 // grow first: a replacement must exist
		} else if len(empty) == 0 && action == 0 {
			action = 1 + rng.IntN(3)
		}
		if action == 1 && len(learners) == 0 {
			// No learner to take a dead voter's place: the policy rightly
			// keeps the dead voter (removing it could not restore the
			// target), so killing one now tests nothing. Grow instead.
			if len(empty) > 0 {
				action = 0
			} else {
				action = 2
			}
		}
		switch action {
		case 0: // add a new member
			s := empty[rng.IntN(len(empty))]
			applied["add"]++
			if err := c.Start(s, true); err != nil {
				logf("add slot %d: %v", s, err)
				break
			}
			// Once in the configuration it must catch up promptly, from a
			// snapshot if the log was compacted before it was added.
			took, err := c.catchUp(ctx, s)
			switch {
			case ctx.Err() != nil:
			case errors.Is(err, errStaysLight):
				applied["add-light"]++
				logf("slot %d: %v", s, err)
			case err != nil:
				logf("add slot %d: %v", s, err)
			case took > ChurnCatchUpBound:
				viol("churn: slot %d caught up %v after it entered the configuration (bound %v)", s, took.Round(time.Millisecond), ChurnCatchUpBound)
			default:
				logf("slot %d caught up %v after it entered the configuration", s, took.Round(time.Millisecond))
			}
		case 1: // kill a voter for good: it must be replaced
			// Only a voter the leader counts healthy now: one still catching
			// up after a restart is unhealthy already, and its replacement
			// may rightly come sooner than DeadVoterAfter after the kill.
			fit := c.healthyOnLeader(ctx, voters)
			if len(fit) == 0 {
				logf("no voter healthy on the leader; no kill this round")
				break
			}
			victim := fit[rng.IntN(len(fit))]
			s := c.SlotOf(victim)
			applied["kill-voter"]++
			killed := time.Now()
			c.Crash(s)
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			_, _, err := c.waitHealthy(wctx, applied, logf, func(v, l []uint64) bool {
				return healthyVoters(c, v) && !slices.Contains(v, victim) && !slices.Contains(l, victim)
			})
			cancel()
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				viol("churn: dead voter %016x not replaced: %v", victim, err)
				return
			}
			logf("voter %016x replaced after %v", victim, time.Since(killed).Round(time.Millisecond))
			if time.Since(killed) < c.policy.DeadVoterAfter {
				viol("churn: voter %016x replaced after %v, before the %v threshold", victim, time.Since(killed), c.policy.DeadVoterAfter)
			}
			c.forget(s) // gone for good: the slot's next start is fresh
		case 2: // kill -9 any member and restart it from disk soon after
			s := running[rng.IntN(len(running))]
			applied["kill-restart"]++
			c.Crash(s)
			sleepCtx(ctx, dur(100*time.Millisecond, time.Second))
			if err := c.Start(s, false); err != nil {
				logf("restart slot %d: %v", s, err)
			} else if c.removedWhileAway(ctx, s) {
				// Removed from the configuration while it was down: it
				// stopped with ErrRemoved, as it should. Rejoin fresh.
				logf("slot %d was removed while down (ErrRemoved); rejoining with a fresh data dir", s)
				applied["rejoin-fresh"]++
				c.Crash(s)
				c.forget(s)
				if err := c.Start(s, true); err != nil {
					logf("rejoin slot %d: %v", s, err)
				}
			}
		case 3: // close a member gracefully: it leaves
			s := running[rng.IntN(len(running))]
			applied["leave"]++
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := c.Leave(lctx, s); err != nil {
				logf("close slot %d: %v", s, err)
			}
			cancel()
		}
	}
}

// ChurnCatchUpBound is how long a member added under churn may take from
// entering the configuration to applying what the leader had applied then.
// A catch-up is a snapshot (at most a few hundred KiB here) or a few
// hundred entries over loopback; the bound leaves room for a loaded machine.
const ChurnCatchUpBound = 3 * time.Second

// catchUp waits until the node in slot is in the configuration, then until
// it applied what the leader had applied at that moment; it returns the
// time between. It gives up (error) if the node is removed, stops, or does
// not enter the configuration within 15 s.
func (c *GossipCluster) catchUp(ctx context.Context, slot uint64) (time.Duration, error) {
	n := c.Node(slot)
	if n == nil {
		return 0, fmt.Errorf("not running")
	}
	id := n.ID()
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	v, l, err := c.WaitConf(wctx, func(v, l []uint64) bool {
		return slices.Contains(v, id) || slices.Contains(l, id) || c.full(v, l)
	})
	if err != nil {
		return 0, fmt.Errorf("not in the configuration (voters %016x learners %016x): %w", v, l, err)
	}
	if !slices.Contains(v, id) && !slices.Contains(l, id) {
		if err := n.Ready(wctx); err != nil {
			return 0, fmt.Errorf("not ready as a light member: %w", err)
		}
		c.mu.Lock()
		c.light[id] = true
		c.mu.Unlock()
		return 0, errStaysLight
	}
	in := time.Now()
	var target uint64
	for _, s := range c.Running() {
		if m := c.Node(s); m != nil && m.Leader() == m.ID() {
			if st, err := m.Status(wctx); err == nil {
				target = st.Applied
			}
		}
	}
	for giveUp := in.Add(5 * ChurnCatchUpBound); time.Now().Before(giveUp); {
		if c.Node(slot) != n {
			return 0, fmt.Errorf("stopped before it caught up")
		}
		if st, err := n.Status(ctx); err == nil && st.Applied >= target {
			return time.Since(in), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return time.Since(in), nil // not caught up: over the bound
}

// errStaysLight: a member added to a full configuration serves as a light
// member; it has no log to catch up.
var errStaysLight = errors.New("the configuration is full: it serves as a light member")

// full reports whether the configuration holds as many voters and learners
// as the policy keeps: a member outside it is light, not waiting to join.
func (c *GossipCluster) full(v, l []uint64) bool {
	d := membership.DefaultThresholds()
	mv, ml := c.policy.MaxVoters, c.policy.MaxLearners
	if mv <= 0 {
		mv = d.MaxVoters
	}
	if ml == 0 {
		ml = d.MaxLearners
	}
	return len(v) >= mv && len(l) >= max(ml, 0)
}

// noteLight records the running members outside a full configuration.
func (c *GossipCluster) noteLight(v, l []uint64) {
	if !c.full(v, l) {
		return
	}
	for _, s := range c.Running() {
		if n := c.Node(s); n != nil && !slices.Contains(v, n.ID()) && !slices.Contains(l, n.ID()) {
			c.mu.Lock()
			c.light[n.ID()] = true
			c.mu.Unlock()
		}
	}
}

// replicaSlots is the slots of up whose members are in the configuration
// (light members keep no log); all of up if the configuration is not known.
func (c *GossipCluster) replicaSlots(ctx context.Context, up []uint64) []uint64 {
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	v, l, err := c.ConfState(qctx)
	cancel()
	if err != nil {
		return up
	}
	var out []uint64
	for _, s := range up {
		if n := c.Node(s); n != nil && (slices.Contains(v, n.ID()) || slices.Contains(l, n.ID())) {
			out = append(out, s)
		}
	}
	return out
}

// healthyOnLeader is the members of ids that the leader counts healthy
// (heard from within an election timeout, gossip alive) and caught up.
func (c *GossipCluster) healthyOnLeader(ctx context.Context, ids []uint64) []uint64 {
	for _, s := range c.Running() {
		n := c.Node(s)
		if n == nil || n.Leader() != n.ID() {
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		mv, err := n.InspectMembers(qctx, node.ReadOptions{})
		cancel()
		if err != nil {
			return nil
		}
		var out []uint64
		for _, m := range mv.Members {
			if id := uint64(m.ID); slices.Contains(ids, id) && m.Healthy && m.LagKnown && m.Lag <= membership.DefaultThresholds().MaxLag {
				out = append(out, id)
			}
		}
		return out
	}
	return nil
}

func healthyVoters(c *GossipCluster, v []uint64) bool {
	if len(v) < 3 {
		return false
	}
	for _, id := range v {
		if c.SlotOf(id) == 0 {
			return false
		}
	}
	return true
}

// runChurn is Run for FaultChurn and FaultChurnLight: the same workload and
// checks against a gossip-mode fleet (churn: 5 slots, 3 to 5 members
// running, all in the configuration; churn-light: 6 slots, 3 voters, 1
// standby and up to 2 light members).
func runChurn(ctx context.Context, rc RunConfig, light bool) (*Report, error) {
	rc.Logf("seed %d faults %v duration %v (gossip fleet)", rc.Seed, rc.Faults, rc.Duration)
	rng := rand.New(rand.NewPCG(rc.Seed, 0xc4a05))
	initial, slots, policy := 3, max(rc.Size, 3)+2, ChurnThresholds()
	if light {
		// Five from the start: one of them is light from the first change.
		initial, slots, policy = 5, max(rc.Size, 3)+3, churnLightThresholds()
	}
	c, err := newGossipCluster(rc.BaseDir, initial, slots, policy, rc.Plant, rc.Logger, rc.Logf)
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	_, _, err = c.WaitConf(wctx, func(v, l []uint64) bool { return len(v) == 3 })
	if err == nil {
		_, err = c.WaitLeader(wctx)
	}
	wcancel()
	if err != nil {
		return nil, fmt.Errorf("gossip fleet did not form: %w", err)
	}
	rep := &Report{Seed: rc.Seed, Faults: strings.Join(rc.Faults, ","), Injected: map[string]int{}}
	var vmu sync.Mutex
	viol := func(f string, a ...any) {
		vmu.Lock()
		rep.Violations = append(rep.Violations, fmt.Sprintf(f, a...))
		vmu.Unlock()
	}
	w := NewWorkload(c, rc.Seed, rc.Workload)
	explainStop := make(chan struct{})
	var explaining sync.WaitGroup
	defer explaining.Wait()
	defer close(explainStop)
	w.Store.OnLive = explainLive(c.Applied, rc.Logf, explainStop, &explaining)
	runCtx, cancel := context.WithTimeout(ctx, rc.Duration)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		churnSchedule(runCtx, c, rng, rep.Injected, viol, rc.Logf)
	}()
	w.Run(runCtx)
	<-done
	end := w.H.Now()

	settleCtx, settleCancel := context.WithTimeout(ctx, 30*time.Second)
	if err := c.settle(settleCtx, rep.Injected, rc.Logf); err != nil {
		viol("the fleet did not settle at the end: %v", err)
	}
	settleCancel()
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	probe := nodeSetProbe(c)
	probe.replicas = func() []uint64 { return c.replicaSlots(sctx, probe.ids()) }
	probe.checkSettled(sctx, "", viol)
	rep.Notes = append(rep.Notes, "churn: full-cluster crash/replay (S3 replay) not run: gossip addresses change on restart; S3 checked on the applied log")
	if light {
		c.mu.Lock()
		seen := len(c.light)
		c.mu.Unlock()
		rep.Notes = append(rep.Notes, fmt.Sprintf("churn-light: %d members served as light members (outside the configuration) between changes", seen))
		if seen == 0 {
			viol("churn-light: no member served as a light member")
		}
	}

	ops := w.H.Ops()
	finishReport(rep, ops, end, w.H, c.Applied, w.Store, rc, viol)
	checkObservations(rep, w, c.Applied, viol)
	return rep, nil
}

// finishReport fills the counts and runs the history checks shared by every
// mode: replica agreement, token order, acknowledged grants in the log,
// porcupine and the fencing store.
//
// h is the history's clock for the applied log's times (nil: the log has
// none that match the history's clock, as in multi-process runs).
func finishReport(rep *Report, ops []Op, end int64, h *History, applied *AppliedLog, store *FencedStore, rc RunConfig, viol func(string, ...any)) {
	rep.Ops = len(ops)
	rep.OpsByPrim = OpsByPrimitive(ops)
	for _, op := range ops {
		if op.Outcome == OK || op.Outcome == Locked {
			rep.Determinate++
		}
		if op.Kind != OpUnlock && op.Outcome == OK {
			rep.Grants++
		}
	}
	rep.LongestGap = LongestGap(ops, end)
	rep.Entries = applied.Entries()
	if n := applied.SessionRuns(); n > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("sessions ended in runs: %d run entries", n))
	}
	for _, s := range applied.Divergence() {
		viol("replicas diverge: %s", s)
	}
	for i, s := range applied.TokenOrder() {
		if i < 5 {
			viol("S2: %s", s)
		}
	}
	for i, s := range applied.AckedLost(ops) {
		if i < 5 {
			viol("S3: %s", s)
		}
	}
	outcomes := GrantedOnly(applied.Granted)
	if h != nil {
		outcomes = applied.Outcomes(h)
	}
	if rc.HistoryFile != "" {
		if err := SaveHistory(rc.HistoryFile, ops, outcomes); err != nil {
			rep.Notes = append(rep.Notes, "history not saved: "+err.Error())
		}
	}
	check := func() { checkLinearizable(rep, ops, outcomes, rc, viol) }
	if rc.checkLater {
		rep.checkLater = check // RunSim: outside its bubble, where time is real
	} else {
		check()
	}
	rep.Writes, rep.Stale, rep.Accepted, rep.Live = store.Counts()
	if rep.Accepted > 0 {
		viol("fencing: %d accepted overlapping critical sections", rep.Accepted)
	}
	if rep.Live > 0 {
		msg := fmt.Sprintf("S5/S1: %d critical sections entered while the previous holder still believed it held the lock", rep.Live)
		if S5Exempt(rc.Faults) {
			rep.Notes = append(rep.Notes, msg+" (expected under this fault: fencing must cover it)")
		} else {
			viol("%s", msg)
		}
	}
	store.mu.Lock()
	rep.Notes = append(rep.Notes, store.Examples...)
	store.mu.Unlock()
	slices.Sort(rep.Notes)
}

// rejoinRemoved restarts, with a fresh data directory (a new member), every
// running member that stopped with lockerr.ErrRemoved: the leader removed it
// from the configuration (it was down, or gossip counted it as failed, past
// the threshold) and it learned so from the leader's notice. That is what
// ErrRemoved asks of an operator; here the harness is the operator. The
// removed member cancelled its holds when it stopped, and its session
// expires by TTL like a crashed member's, so rejoining hides nothing.
func (c *GossipCluster) rejoinRemoved(ctx context.Context, injected map[string]int, logf func(string, ...any)) {
	for _, s := range c.Running() {
		n := c.Node(s)
		if n == nil {
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := n.Status(qctx)
		cancel()
		if !errors.Is(err, lockerr.ErrRemoved) {
			continue
		}
		logf("slot %d (raft id %016x) stopped with ErrRemoved; rejoining it with a fresh data dir", s, n.ID())
		injected["rejoin-fresh"]++
		c.Crash(s)
		c.forget(s)
		if err := c.Start(s, true); err != nil {
			logf("rejoin slot %d: %v", s, err)
		}
	}
}

// waitHealthy is WaitConf that also rejoins removed members while it waits
// (a member may be removed at any time, e.g. one restarted from disk that
// gossip still counted as failed).
func (c *GossipCluster) waitHealthy(ctx context.Context, injected map[string]int, logf func(string, ...any),
	ok func(voters, learners []uint64) bool) ([]uint64, []uint64, error) {
	return c.waitConf(ctx, func() { c.rejoinRemoved(ctx, injected, logf) }, ok)
}

// settle brings the fleet to what the end checks need: removed members
// rejoined, a healthy configuration that every running member is part of
// (none left to be removed during the checks), and one leader all agree on.
func (c *GossipCluster) settle(ctx context.Context, injected map[string]int, logf func(string, ...any)) error {
	var last error
	for {
		_, _, err := c.waitHealthy(ctx, injected, logf, func(v, l []uint64) bool {
			if !healthyVoters(c, v) {
				return false
			}
			if c.full(v, l) {
				c.noteLight(v, l)
				return true // the members outside it are light
			}
			for _, s := range c.Running() {
				if n := c.Node(s); n != nil && !slices.Contains(v, n.ID()) && !slices.Contains(l, n.ID()) {
					return false
				}
			}
			return true
		})
		if err != nil {
			return errors.Join(err, last)
		}
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, last = c.WaitLeader(lctx)
		cancel()
		if last == nil {
			return nil
		}
	}
}

// removedWhileAway reports whether the node in slot stopped with
// lockerr.ErrRemoved shortly after its restart (it was removed from the
// configuration while it was down).
func (c *GossipCluster) removedWhileAway(ctx context.Context, slot uint64) bool {
	n := c.Node(slot)
	if n == nil {
		return false
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := n.Status(sctx)
		cancel()
		if errors.Is(err, lockerr.ErrRemoved) {
			return true
		}
		if err == nil {
			if st, _ := n.Status(ctx); st.Leader != 0 {
				return false
			}
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
	return false
}

// checkLinearizable judges the history with porcupine under the model of
// each primitive, bounded by rc.CheckTimeout.
func checkLinearizable(rep *Report, ops []Op, outcomes Outcomes, rc RunConfig, viol func(string, ...any)) {
	// Decide first without the partial linearizations (their memory grows
	// with the square of a partition's size); compute them only to draw a
	// violation.
	res := CheckCatalogueResult(ops, outcomes, rc.CheckTimeout)
	rep.Linearizable = res
	switch res {
	case porcupine.Illegal:
		viol("porcupine: history not linearizable under the model of its primitives")
		_, info := CheckCatalogue(ops, outcomes, rc.CheckTimeout)
		if f, err := os.CreateTemp("", fmt.Sprintf("chaos-%d-*.html", rc.Seed)); err == nil {
			if porcupine.Visualize(CatalogueModel(), info, f) == nil {
				rep.Notes = append(rep.Notes, "porcupine visualization: "+f.Name())
			}
			f.Close()
		}
	case porcupine.Unknown:
		rep.Notes = append(rep.Notes, "porcupine timed out: linearizability not decided")
	}
}
