package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/cluster"
	"github.com/lockraft/lockraft/internal/faults"
	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/node/internal/fleet"
)

// newGossipCluster is a fleet of size real nodes (real gRPC, bbolt, memberlist on
// loopback) in the harness, slots 1..size, that find each other by gossip;
// none runs yet: startSlot starts one. Slot i is named "<name>-<i>", as a
// StatefulSet names its pods, and name is the ClusterID; the founders are
// slots 1..expect (with expect 1, slot 1 forms alone: the development
// mode). tune applies after the defaults; every slot has its Faults
// (f.Faults(slot), faultsOf), which block raft ids (a gossip member's
// raft id is not its slot).
func newGossipCluster(t testing.TB, name string, size, expect int, tune ...func(*Config)) *cluster.Cluster[*Node] {
	t.Helper()
	var founders []string
	for i := 1; i <= expect; i++ {
		founders = append(founders, fmt.Sprintf("%s-%d", name, i))
	}
	return startCluster(t, cluster.Options[*Node]{Size: size, Gossip: true, Initial: -1}, func(s cluster.Spec) Config {
		g := &GossipConfig{
			Seeds:           s.Seeds,
			Name:            fmt.Sprintf("%s-%d", name, s.ID),
			Founders:        slices.Clone(founders),
			BootstrapExpect: expect,
			Timing:          membership.FastTiming(),
			Thresholds: membership.Thresholds{
				StabilizeFor:   300 * time.Millisecond,
				DeadVoterAfter: 1500 * time.Millisecond,
				// A learner starved of CPU on a loaded test machine misses
				// gossip probes for a second or two: removing it then
				// stops it (lockerr.ErrRemoved) in tests that are not about that.
				DeadLearnerAfter: 3 * time.Second,
			},
			ReconcileEvery: 100 * time.Millisecond,
		}
		if expect == 1 && s.ID == 1 {
			g.Founders = nil // the development mode: the first slot founds alone
		}
		return Config{DataDir: s.Dir, ClusterID: name, Gossip: g}
	}, tune)
}

// startSlot starts slot i of fleet f (from its data directory, if it ran
// before), joining through seeds (none: alone), and returns its node.
func startSlot(t testing.TB, f *cluster.Cluster[*Node], i uint64, seeds ...string) *Node {
	t.Helper()
	require.NoError(t, f.StartVia(i, seeds...))
	return f.Member(i)
}

// startSeeded starts slots 1 to n of f, each after the first with the
// first's gossip address as its seed.
func startSeeded(t testing.TB, f *cluster.Cluster[*Node], n uint64) {
	t.Helper()
	seed := startSlot(t, f, 1).GossipAddr()
	for i := uint64(2); i <= n; i++ {
		startSlot(t, f, i, seed)
	}
}

// formThree starts slots 1 to 3 of f (startSeeded) and waits until they
// form a configuration of 3 voters with a leader. It returns the voters,
// the leader and a follower.
func formThree(t testing.TB, f *cluster.Cluster[*Node]) (voters []uint64, lead, follower *Node) {
	t.Helper()
	startSeeded(t, f, 3)
	voters, _ = waitConf(t, f, 30*time.Second, "3 voters", func(v, l []uint64) bool { return len(v) == 3 })
	lead = fleetLeader(t, f, 10*time.Second)
	for _, n := range f.All() {
		if n != lead {
			follower = n
		}
	}
	return voters, lead, follower
}

// formFour starts slots 1 to 4 of f (startSeeded) and waits until they form
// a configuration of 3 voters and 1 learner. It returns the voters and the
// slot of the learner.
func formFour(t testing.TB, f *cluster.Cluster[*Node]) (voters []uint64, learner uint64) {
	t.Helper()
	startSeeded(t, f, 4)
	voters, learners := waitConf(t, f, 30*time.Second, "3 voters + 1 learner", func(v, l []uint64) bool { return len(v) == 3 && len(l) == 1 })
	learner = slotWhere(f, func(n *Node) bool { return n.ID() == learners[0] })
	require.NotZero(t, learner)
	return voters, learner
}

// slotWhere is the first slot of f whose running member is one for which ok
// is true (0: none).
func slotWhere(f *cluster.Cluster[*Node], ok func(*Node) bool) uint64 {
	for i, n := range f.All() {
		if ok(n) {
			return i
		}
	}
	return 0
}

// slotOf is the slot of f that runs n (0: none).
func slotOf(f *cluster.Cluster[*Node], n *Node) uint64 {
	return slotWhere(f, func(m *Node) bool { return m == n })
}

// faultsOf is the Faults of the slot of f that runs n.
func faultsOf(f *cluster.Cluster[*Node], n *Node) *faults.Faults {
	i := slotOf(f, n)
	if i == 0 {
		panic("faultsOf: the node does not run in the fleet")
	}
	return f.Faults(i)
}

// fleetLeader returns the running node of f that leads.
func fleetLeader(t testing.TB, f *cluster.Cluster[*Node], timeout time.Duration) *Node {
	t.Helper()
	var lead *Node
	require.Eventually(t, func() bool {
		lead = nil
		for _, n := range f.All() {
			if n.Leader() == n.ID() {
				lead = n
			}
		}
		return lead != nil
	}, timeout, 10*time.Millisecond, "no leader")
	return lead
}

// waitConf waits until the configuration of f's leader satisfies ok.
func waitConf(t testing.TB, f *cluster.Cluster[*Node], timeout time.Duration, what string, ok func(voters, learners []uint64) bool) (voters, learners []uint64) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, n := range f.All() {
			if n.Leader() != n.ID() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			v, l, err := n.ConfState(ctx)
			cancel()
			if err == nil && ok(v, l) {
				return v, l
			}
			voters, learners = v, l
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("configuration never reached %s: last voters %x learners %x", what, voters, learners)
	logMembers(t, f)
	t.FailNow()
	return nil, nil
}

// logMembers logs each leader's view of the members (role, gossip state,
// health, replication lag): why a reconcile step did not come.
func logMembers(t testing.TB, f *cluster.Cluster[*Node]) {
	t.Helper()
	for _, n := range f.All() {
		if n.Leader() != n.ID() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		mv, err := n.InspectMembers(ctx, ReadOptions{})
		cancel()
		if err != nil {
			t.Logf("leader %x: members: %v", n.ID(), err)
			continue
		}
		for _, m := range mv.Members {
			t.Logf("leader %x sees %s: role %s gossip %q healthy %v match %d lag %d (known %v)",
				n.ID(), m.ID, m.Role, m.Gossip, m.Healthy, m.Match, m.Lag, m.LagKnown)
		}
	}
}

func TestGossipFormAndGrow(t *testing.T) {
	// Sessions outlive a loaded machine's stalls: the test is about the
	// configuration, not about sessions.
	f := newGossipCluster(t, "grow", 7, 3, func(c *Config) { c.SessionTTL = 5 * time.Second })
	start := time.Now()
	startSlot(t, f, 1)
	for i := uint64(2); i <= 5; i++ {
		// Each is given one seed: the previous instance.
		prev := f.Member(i - 1).GossipAddr()
		startSlot(t, f, i, prev)
	}
	voters, _ := waitConf(t, f, 20*time.Second, "formed", func(v, l []uint64) bool { return len(v) >= 3 })
	t.Logf("formed with voters %x after %v", voters, time.Since(start))
	ids := map[uint64]bool{}
	for _, n := range f.All() {
		ids[n.ID()] = true
	}
	for _, v := range voters {
		require.True(t, ids[v], "voter %x is one of ours", v)
	}
	// Every instance sees the same leader: one cluster.
	require.Eventually(t, func() bool {
		lead := uint64(0)
		for _, n := range f.All() {
			if l := n.Leader(); l == 0 || (lead != 0 && l != lead) {
				return false
			}
			lead = n.Leader()
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "one leader for all five")

	startSlot(t, f, 6, f.Member(5).GossipAddr())
	startSlot(t, f, 7, f.Member(6).GossipAddr())
	voters, learners := waitConf(t, f, 30*time.Second, "5 voters + 2 learners", func(v, l []uint64) bool { return len(v) == 5 && len(l) == 2 })
	t.Logf("voters %x learners %x after %v", voters, learners, time.Since(start))

	ctx := ctxT(t, 30*time.Second)
	for _, n := range f.All() {
		if slices.Contains(voters, n.ID()) || slices.Contains(learners, n.ID()) {
			h := acquireRetrying(t, ctx, n, "grow", fmt.Sprintf("o-%x", n.ID()))
			require.NoError(t, h.Release(ctx))
		}
	}
}

// acquireRetrying takes name for owner on n, retrying the errors the
// documentation calls safe to retry when the cluster cannot serve for a
// while (a session that expired while the machine was starved, no leader
// for a moment), until ctx ends.
func acquireRetrying(t testing.TB, ctx context.Context, n *Node, name, owner string) *Hold {
	t.Helper()
	for {
		h, err := n.Acquire(ctx, name, owner, true, 0)
		if err == nil {
			return h
		}
		if ctx.Err() != nil || !(errors.Is(err, lockerr.ErrSessionExpired) || errors.Is(err, lockerr.ErrUnavailable)) {
			require.NoError(t, err)
		}
		t.Logf("%x: %s: %v; again", n.ID(), name, err)
		select { // a pause between calls that may fail at once
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func TestGossipReplaceDeadVoter(t *testing.T) {
	f := newGossipCluster(t, "heal", 4, 3)
	voters, _ := formFour(t, f)
	lead := fleetLeader(t, f, 5*time.Second)

	// A lock held on the leader across the whole failure, and a stream of
	// lock operations that must keep succeeding.
	ctx := ctxT(t, 30*time.Second)
	held, err := lead.Acquire(ctx, "held", "holder", true, 0)
	require.NoError(t, err)
	var ops, fails atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			octx, cancel := context.WithTimeout(ctx, 3*time.Second)
			h, err := lead.Acquire(octx, fmt.Sprintf("op-%d", i%8), "worker", true, 0)
			if err == nil {
				err = h.Release(octx)
			}
			cancel()
			if err != nil {
				fails.Add(1)
				t.Logf("lock op: %v", err)
			} else {
				ops.Add(1)
			}
		}
	}()

	victim := slotWhere(f, func(n *Node) bool { return n != lead && slices.Contains(voters, n.ID()) })
	victimID := f.Member(victim).ID()
	killed := time.Now()
	f.Crash(victim)
	voters, learners := waitConf(t, f, 20*time.Second, "victim replaced", func(v, l []uint64) bool {
		return len(v) == 3 && !slices.Contains(v, victimID) && !slices.Contains(l, victimID)
	})
	t.Logf("voter %x replaced after %v: voters %x learners %x", victimID, time.Since(killed), voters, learners)
	require.GreaterOrEqual(t, time.Since(killed), 1500*time.Millisecond, "not before the threshold")
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	require.Zero(t, fails.Load(), "every lock operation succeeded")
	require.Positive(t, ops.Load())
	require.NoError(t, context.Cause(held.Context()), "the held lock was never lost")
	require.NoError(t, held.Release(ctx))
}

func TestGossipRestartRejoins(t *testing.T) {
	f := newGossipCluster(t, "restart", 3, 3)
	startSlot(t, f, 1)
	startSlot(t, f, 2, f.Member(1).GossipAddr())
	startSlot(t, f, 3, f.Member(2).GossipAddr())
	voters, _ := waitConf(t, f, 20*time.Second, "3 voters", func(v, l []uint64) bool { return len(v) == 3 })
	lead := fleetLeader(t, f, 5*time.Second)
	ctx := ctxT(t, 20*time.Second)
	h, err := lead.Acquire(ctx, "before", "o", true, 0)
	require.NoError(t, err)
	victim := slotWhere(f, func(n *Node) bool { return n != lead })
	oldID := f.Member(victim).ID()
	f.Crash(victim)
	n := startSlot(t, f, victim, lead.GossipAddr())
	require.Equal(t, oldID, n.ID(), "restarted with its old raft id")
	require.Eventually(t, func() bool { return n.Leader() != 0 && n.Leader() == lead.Leader() }, 10*time.Second, 10*time.Millisecond)
	after, _ := waitConf(t, f, 10*time.Second, "same voters", func(v, l []uint64) bool { return slices.Equal(v, voters) })
	require.Equal(t, voters, after)
	// It serves locks in the old cluster: the name held before is still held.
	_, err = n.Acquire(ctx, "before", "other", false, 0)
	require.ErrorIs(t, err, lockerr.ErrLocked)
	require.NoError(t, h.Release(ctx))
	h2, err := n.Acquire(ctx, "before", "other", true, 0)
	require.NoError(t, err)
	require.NoError(t, h2.Release(ctx))
}

func TestGossipClustersNeverMerge(t *testing.T) {
	a := newGossipCluster(t, "alpha", 3, 3)
	b := newGossipCluster(t, "beta", 3, 3)
	startSlot(t, a, 1)
	startSlot(t, b, 1, a.Member(1).GossipAddr()) // a wrong seed: the other cluster
	for i := uint64(2); i <= 3; i++ {
		startSlot(t, a, i, a.Member(1).GossipAddr(), b.Member(1).GossipAddr())
		startSlot(t, b, i, b.Member(1).GossipAddr(), a.Member(1).GossipAddr())
	}
	va, _ := waitConf(t, a, 20*time.Second, "alpha formed", func(v, l []uint64) bool { return len(v) == 3 })
	vb, _ := waitConf(t, b, 20*time.Second, "beta formed", func(v, l []uint64) bool { return len(v) == 3 })
	for _, id := range va {
		require.NotContains(t, vb, id)
	}
	for name, f := range map[string]*cluster.Cluster[*Node]{"alpha": a, "beta": b} {
		for _, n := range f.All() {
			for _, m := range n.Members() {
				require.Equal(t, name, m.Meta.ClusterID)
			}
		}
	}
}

func TestGossipSingleNodeAndLeave(t *testing.T) {
	f := newGossipCluster(t, "single", 3, 1)
	n := startSlot(t, f, 1)
	waitConf(t, f, 10*time.Second, "1 voter", func(v, l []uint64) bool { return len(v) == 1 && v[0] == n.ID() })
	ctx := ctxT(t, 10*time.Second)
	h, err := n.Acquire(ctx, "x", "o", true, 0)
	require.NoError(t, err)
	require.NoError(t, h.Release(ctx))

	// Two more join (never re-bootstrapping: the first has data); then a
	// voter leaves (Leave: for good) and is removed from the configuration.
	startSlot(t, f, 2, n.GossipAddr())
	startSlot(t, f, 3, n.GossipAddr())
	voters, _ := waitConf(t, f, 20*time.Second, "3 voters", func(v, l []uint64) bool { return len(v) == 3 })
	leaver := f.Member(2)
	require.Contains(t, voters, leaver.ID())
	require.NoError(t, leaver.Leave(ctx))
	f.Stopped(2)
	waitConf(t, f, 10*time.Second, "leaver removed", func(v, l []uint64) bool {
		return !slices.Contains(v, leaver.ID()) && !slices.Contains(l, leaver.ID())
	})
}

// TestGossipWrongKeyRefused: a member with the wrong gossip key is refused —
// it never appears among the members nor in the raft configuration — and
// the refusal is logged clearly on the member it tried to reach.
func TestGossipWrongKeyRefused(t *testing.T) {
	key := []byte("0123456789abcdef")
	logs := &logSink{}
	f := newGossipCluster(t, "keyed", 4, 3, func(c *Config) {
		c.Gossip.SecretKey = key
		switch c.Gossip.Name {
		case "keyed-1":
			c.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(logs, tWriter{t}), nil))
		case "keyed-4": // the intruder
			c.Gossip.SecretKey = []byte("fedcba9876543210")
		}
	})
	startSeeded(t, f, 3)
	first := f.Member(1)
	voters, _ := waitConf(t, f, 20*time.Second, "keyed cluster formed", func(v, l []uint64) bool { return len(v) == 3 })
	intruder := startSlot(t, f, 4, first.GossipAddr())
	require.Eventually(t, func() bool { return logs.CountLines("decrypt") > 0 }, 10*time.Second, 20*time.Millisecond,
		"the refusal of a wrong-key member must be logged")
	for _, n := range []*Node{first, f.Member(2), f.Member(3)} {
		for _, m := range n.Members() {
			require.NotEqual(t, intruder.ID(), m.Meta.RaftID, "wrong-key member admitted to gossip")
		}
	}
	v, l := waitConf(t, f, 5*time.Second, "configuration unchanged", func(v, l []uint64) bool { return len(v) == 3 })
	require.ElementsMatch(t, voters, v)
	require.NotContains(t, append(v, l...), intruder.ID())
}

// TestGossipRemovedWhileAwayStops: a learner that was removed while it was
// down comes back with its old raft state. The leader tells it it is no
// longer a member, so it stops with lockerr.ErrRemoved instead of campaigning
// forever with Lock calls that never return.
func TestGossipRemovedWhileAwayStops(t *testing.T) {
	f := newGossipCluster(t, "removed", 4, 3)
	_, slot := formFour(t, f)
	// In the configuration is not yet holding raft state: the premise is a
	// member that comes back *with* its data.
	learner := f.Member(slot)
	id := learner.ID()
	require.Eventually(t, func() bool { return learner.storage.HasState() }, 20*time.Second, 10*time.Millisecond,
		"the learner never received raft state")
	f.Crash(slot)
	waitConf(t, f, 20*time.Second, "the dead learner removed", func(v, l []uint64) bool {
		return len(v) == 3 && !slices.Contains(l, id)
	})
	back := startSlot(t, f, slot, f.Member(f.Running()[0]).GossipAddr()) // slot 1 may be the one that was crashed
	require.Equal(t, id, back.ID(), "restarted with its data and id")
	// The leader notices it on its next reconcile; until then a call may
	// still go through. It must end up stopped with lockerr.ErrRemoved, not hanging.
	var err error
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var h *Hold
		h, err = back.Acquire(ctx, "x", "o", true, 0)
		if h != nil {
			h.Release(ctx)
		}
		return errors.Is(err, lockerr.ErrRemoved)
	}, 20*time.Second, 50*time.Millisecond, "never told it was removed (last error %v)", err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = back.Acquire(ctx, "y", "o", false, 0)
	require.ErrorIs(t, err, lockerr.ErrRemoved, "it keeps refusing")
}

// TestSessionOpenedLateIsKept: a member that starts more than a TTL before
// the cluster forms keeps the session it then gets. Its holder-side deadline
// counts from the first OpenSession that could reach a leader; counted from
// its first attempt (made before any cluster existed), the session looked
// expired on arrival and was given up at once: the Acquire failed with
// lockerr.ErrSessionExpired or the session was replaced.
func TestSessionOpenedLateIsKept(t *testing.T) {
	f := newGossipCluster(t, "late", 3, 3)
	n0 := startSlot(t, f, 1)
	ttl := n0.cfg.SessionTTL
	// The premise is elapsed time: the first founder tries to open its
	// session alone, with no cluster to answer, for longer than a TTL.
	time.Sleep(ttl + ttl/2)
	startSlot(t, f, 2, n0.GossipAddr())
	startSlot(t, f, 3, n0.GossipAddr())
	ctx := ctxT(t, 30*time.Second)
	h, err := n0.Acquire(ctx, "late", "o", true, 0)
	require.NoError(t, err)
	sess := n0.sess.Load()
	require.NotZero(t, sess)
	require.Never(t, func() bool { return h.Context().Err() != nil || n0.sess.Load() != sess }, ttl/2, 10*time.Millisecond,
		"the hold or the session was given up: the late session looked expired")
	require.NoError(t, h.Release(ctx))
}

// TestCloseHandsOutNoLiveHold: Close tells every holder that its lock is
// lost before it proposes the CloseSession that releases them all (S5: once
// that entry commits, the next waiter may be granted at once, on a node that
// applies it before this one does). A grant this node applies after Close
// began must therefore not hand out a live hold either: neither to a Lock
// call that was queued (its grant comes as an event) nor to one whose
// Acquire was still in flight (its grant comes as its result). Here both
// grants commit while the closing learner hears nothing, Close starts, and
// only then does the learner catch up and apply them: both Lock calls must
// fail with lockerr.ErrClosed. Found by the churn soak (members closed while one of
// their Lock calls was queued: live overlaps).
func TestCloseHandsOutNoLiveHold(t *testing.T) {
	f := newGossipCluster(t, "closegrant", 4, 3)
	_, slot := formFour(t, f)
	a := f.Member(slot)
	lead := fleetLeader(t, f, 5*time.Second)
	ctx := ctxT(t, 30*time.Second)

	type result struct {
		name string
		h    *Hold
		err  error
	}
	got := make(chan result, 2)
	lock := func(name string) {
		go func() {
			hh, err := a.Acquire(ctx, name, "closing", true, 0)
			got <- result{name, hh, err}
		}()
	}
	// "queued": held by the leader; the learner applies its own enqueue.
	h, err := lead.Acquire(ctx, "queued", "holder", true, 0)
	require.NoError(t, err)
	lock("queued")
	require.Eventually(t, func() bool { return a.waiters("queued") == 1 }, 10*time.Second, 5*time.Millisecond)

	// From now on the learner hears nothing (a learner never campaigns, so
	// this disturbs nobody), while what it proposes still reaches the
	// leader: "inflight" is granted and "queued" passes to its waiter.
	var peers []uint64
	for _, n := range f.All() {
		if n != a {
			peers = append(peers, n.ID())
		}
	}
	faultsOf(f, a).BlockIn(peers...)
	lock("inflight")
	require.Eventually(t, func() bool { return lead.holderOf("inflight") == "closing" }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, h.Release(ctx))
	require.Equal(t, "closing", lead.holderOf("queued"))
	require.Equal(t, 1, a.waiters("queued"), "the learner has not applied the grant yet")

	closed := make(chan error, 1)
	go func() { closed <- a.Close(ctx) }()
	require.Eventually(t, a.closing.Load, 5*time.Second, time.Millisecond, "Close began")
	faultsOf(f, a).Heal()

	for range 2 {
		select {
		case r := <-got:
			if r.h != nil {
				t.Errorf("%s: Lock on a closing node returned a hold (token %d, context err %v): once the close "+
					"commits, another node may be granted the lock before this one applies the close",
					r.name, r.h.Token(), r.h.Context().Err())
			}
			require.ErrorIs(t, r.err, lockerr.ErrClosed, r.name)
		case <-ctx.Done():
			t.Fatal("the closing node's Lock calls never returned")
		}
	}
	require.NoError(t, <-closed)
	// The close released both grants.
	for _, name := range []string{"queued", "inflight"} {
		h2, err := lead.Acquire(ctx, name, "next", false, 0)
		require.NoError(t, err, name)
		require.NoError(t, h2.Release(ctx))
	}
}

// holderOf is the owner holding name in n's lock table ("" if free; tests).
func (n *Node) holderOf(name string) string {
	res := make(chan string, 1)
	if n.do(context.Background(), func() {
		l, _ := n.fsm.Lock(name)
		if l.HoldCount == 0 {
			res <- ""
			return
		}
		res <- l.Holder.Owner
	}) != nil {
		return "?"
	}
	return <-res
}

// TestHealthMarksStartAfreshEachTerm (L3, membership policy): a node that
// leads again starts its members' health clocks afresh. The marks it kept
// from an earlier term say nothing of the time between: kept, a voter
// killed just now looked failed since then and was replaced at once, before
// DeadVoterAfter (the churn soak's "voter replaced 0.89 s after it was
// killed"). White-box: the leader is handed a mark as its earlier term
// would have left it (the victim failed an hour ago, term − 1) once it sees
// the killed victim unhealthy; the replacement must still wait the
// threshold from there.
func TestHealthMarksStartAfreshEachTerm(t *testing.T) {
	f := newGossipCluster(t, "marks", 4, 3)
	voters, _ := formFour(t, f)
	lead := fleetLeader(t, f, 5*time.Second)
	ctx := ctxT(t, 30*time.Second)
	victim := slotWhere(f, func(n *Node) bool { return n != lead && slices.Contains(voters, n.ID()) })
	victimID := f.Member(victim).ID()
	f.Crash(victim)
	require.Eventually(t, func() bool {
		mv, err := lead.InspectMembers(ctx, ReadOptions{})
		if err != nil {
			return false
		}
		for _, m := range mv.Members {
			if uint64(m.ID) == victimID {
				return !m.Healthy
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "the leader sees the killed voter unhealthy")
	planted := time.Now()
	require.NoError(t, lead.do(ctx, func() {
		marks := lead.fleet.HealthMarks()
		marks.ByID[victimID] = fleet.HealthMark{Healthy: false, Role: 2, Since: planted.Add(-time.Hour)}
		marks.Term = lead.loop.lease.Term() - 1
	}))
	waitConf(t, f, 20*time.Second, "victim replaced", func(v, l []uint64) bool {
		return len(v) == 3 && !slices.Contains(v, victimID) && !slices.Contains(l, victimID)
	})
	t.Logf("voter %x replaced %v after the stale mark was planted", victimID, time.Since(planted))
	require.GreaterOrEqual(t, time.Since(planted), 1500*time.Millisecond, "replaced before DeadVoterAfter on a mark from an earlier term")
}
