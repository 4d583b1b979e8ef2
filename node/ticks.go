package node

import (
	"crypto/rand"
	mrand "math/rand/v2"
	"time"

	"github.com/lockraft/lockraft/internal/knobs"
	"github.com/lockraft/lockraft/node/internal/tick"
)

// The loop wakes for time on the timers of package tick (node/internal/tick:
// an idle light member ticks slowly, a quiet follower not at all, a calm
// leader once per heartbeat, and the leader's fine ticker runs only while a
// deadline is near). This file is the node's side: the Ticker's
// configuration, its Host, and the leader's work on each tick.

// quietFor is how long after the leader was last heard a follower stays
// quiet: two heartbeat intervals, so one late heartbeat does not end it.
// Zero when that would not leave two ticks before the earliest election.
func (c Config) quietFor() time.Duration {
	q := 2 * c.heartbeatInterval()
	if q+2*c.TickInterval > c.electionTimeout() {
		return 0
	}
	return q
}

// lightIdleTick is the idle light member's tick: the keepalive interval
// (at least one tick), so it wakes no more often than it sends keepalives.
func (c Config) lightIdleTick() time.Duration {
	return max(c.TickInterval, c.KeepaliveInterval)
}

// tickConfig is the Ticker's view of the node's configuration, knobs and
// clock.
func (c Config) tickConfig(k *knobs.Node, clock Clock) tick.Config {
	return tick.Config{
		Interval:       c.TickInterval,
		HeartbeatTicks: c.HeartbeatTicks,
		ElectionTicks:  c.ElectionTicks,
		LightIdle:      c.lightIdleTick(),
		QuietFor:       c.quietFor(),
		Always:         k.FollowerExpiry,
		NewTicker:      clock.NewTicker,
		AfterFunc:      clock.AfterFunc,
		Now:            clock.Now,
		Rand:           phaseRand(),
	}
}

// phaseRand draws the raft ticker's phases uniformly from [0, n), from a
// stream of the node's own seeded once from crypto/rand as the node starts
// (the simulation seeds crypto/rand, which raft's election timeouts come
// from too: chaos.RunSim). Drawing each phase from crypto/rand itself would
// make the nodes' loops, which start at the same instant, take turns on one
// stream in whatever order the Go scheduler runs them, and a seed would no
// longer replay. Only the loop draws (Ticker.Sync).
func phaseRand() func(n int64) int64 {
	var seed [32]byte
	_, _ = rand.Read(seed[:]) // never fails (it crashes the program instead)
	return mrand.New(mrand.NewChaCha8(seed)).Int64N
}

// tickHost is the node as its Ticker's Host (loop).
type tickHost Node

func (h *tickHost) Light() bool                       { return (*Node)(h).light() }
func (h *tickHost) Leader() (id uint64, leading bool) { return h.loop.leader, h.loop.isLeader }
func (h *tickHost) Holding() bool                     { return h.fwd.Holding() }

func (h *tickHost) Settled() bool {
	return !h.loop.jobs.busy && h.fsm.DurableIndex() == h.fsm.AppliedIndex()
}

// Idle: an open session, and nothing that the tick retries or checks.
func (h *tickHost) Idle() bool {
	s, r, rd := &h.loop.own, &h.loop.ops, &h.loop.reads
	return s.id != 0 && !s.closing && len(s.toClose) == 0 && len(s.leased) == 0 &&
		len(r.inflight) == 0 && len(r.queued) == 0 && len(rd.next)+len(rd.rounds)+len(rd.ready) == 0 &&
		!h.fwd.Forwarding()
}

// onFineTick is the fine ticker's work.
func (n *Node) onFineTick() {
	if n.loop.isLeader {
		now := n.clock.Now()
		n.proposeAll(n.loop.lease.Tick(now))
		n.fwd.ExpireReplies(now)
	} else if n.k.FollowerExpiry {
		n.proposeAll(n.loop.lease.FollowerExpiry(n.clock.Now(), n.loop.own.id))
	}
}

// leaderCoarseTick runs on every tick on the leader: with the fine ticker
// off it does the fine ticker's checks itself, and it decides whether the
// next deadline is near enough to turn the fine ticker on.
func (n *Node) leaderCoarseTick(now time.Time) {
	t := n.loop.tick
	n.loop.peers.note(n.rn, n.loop.isLeader, now)
	if !n.loop.isLeader {
		t.WantFine(false)
		return
	}
	if !t.FineRunning() {
		n.proposeAll(n.loop.lease.Tick(now))
		n.fwd.ExpireReplies(now)
	}
	n.proposeRuns(now)
	horizon := now.Add(2 * t.CoarsePeriod()) // a calm leader ticks once per heartbeat
	t.WantFine(n.loop.lease.DeadlineBefore(horizon))
}
