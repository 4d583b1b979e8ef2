package node

import "time"

// A quiet follower does not tick.
//
// A follower's raft tick only counts toward its election timeout, and a
// follower that hears its leader every heartbeat has that count reset each
// time: ten wake-ups a second that decide nothing, each costing the runtime
// several context switches; without them an idle follower of a 10-member
// fleet wakes half as often (211 → 111 context switches a second,
// 0.6 → 0.34 % of a core: bench/cmd/embedcost). So while a follower (or learner) is quiet —
// it hears its leader, has nothing in flight and nothing left to commit to
// the lock table — its ticks are counted from the clock instead: at every
// wake-up, before anything is stepped, raft is ticked once per whole tick
// interval that passed since the last tick it got (catchUpTicks). Raft then
// sees the same count at every message it steps as it would have with a
// ticker (to the tick), so its election timer, its CheckQuorum lease and a
// vote's answer are unchanged. Nothing wakes the loop for a tick, except one
// timer: quietFor after the leader was last heard, when the follower stops
// being quiet and ticks again every TickInterval. That is well before any
// election could fall due (the earliest is one election timeout after the
// last heartbeat), so it campaigns as soon as it would have.
//
// Not quiet: the leader, light members (idletick.go), candidates, a
// follower whose leader has been silent for quietFor, one with proposals,
// reads, session work or a lock-table commit pending (their retries and
// the commit run on the tick), and TestHooks.FollowerExpiry.

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

// quiet reports whether this node is a quiet follower (loop).
func (n *Node) quiet(now time.Time) bool {
	q := n.cfg.quietFor()
	if q == 0 || n.light() || n.loop.isLeader || n.loop.leader == 0 || n.k.FollowerExpiry {
		return false
	}
	if now.Sub(n.loop.tick.heard) >= q || n.loop.fsmBusy || n.fsm.DurableIndex() != n.fsm.AppliedIndex() {
		return false
	}
	return n.nothingInFlight() && !n.rn.HasReady()
}

// noteHeard records a heartbeat or append from the current leader (loop).
func (n *Node) noteHeard(from uint64, now time.Time) {
	if from != 0 && from == n.loop.leader {
		n.loop.tick.heard = now
	}
}

// catchUpTicks ticks raft once per tick interval elapsed since its last
// tick, if the node is quiet (loop). It stops early if raft acts (an
// election falling due makes a Ready): the ticks after that would belong to
// a candidate, which a ticker would not have given it in one go.
func (n *Node) catchUpTicks(now time.Time) {
	t := &n.loop.tick
	if !t.quiet {
		return
	}
	if now.Before(t.last) {
		t.last = now // a clock that went back (chaos's badclock): count from here
		return
	}
	k := int(now.Sub(t.last) / n.cfg.TickInterval)
	if k >= n.cfg.ElectionTicks {
		// The loop itself stalled (a paused process, a long fsync, a clock
		// jump): the messages waiting now arrived meanwhile. Give raft no
		// more than a ticker would have left it — short of an election —
		// rather than a campaign against a leader that was heard all along.
		// The quiet timer keeps its promise: past quietFor the ticker
		// takes over.
		for i := 0; i < n.cfg.ElectionTicks-1 && !n.rn.HasReady(); i++ {
			n.rn.Tick()
		}
		t.last = now
		return
	}
	i := 0
	for ; i < k && !n.rn.HasReady(); i++ {
		n.rn.Tick()
	}
	if i < k {
		t.last = now
		return
	}
	t.last = t.last.Add(time.Duration(k) * n.cfg.TickInterval)
}

// syncQuiet arms or moves the quiet follower's one timer: it fires quietFor
// after the leader was last heard (loop). Each heartbeat moves it on, so
// while the leader is heard it never fires.
func (n *Node) syncQuiet(now time.Time) {
	t := &n.loop.tick
	at := t.heard.Add(n.cfg.quietFor())
	if t.c != nil && at.Equal(t.quietAt) {
		return
	}
	if t.stop != nil {
		t.stop()
	}
	c := make(chan time.Time, 1)
	stop := n.clock.AfterFunc(at.Sub(now), func() {
		select {
		case c <- time.Now():
		default:
		}
	})
	t.c, t.stop, t.quietAt, t.period = c, func() { stop() }, at, 0
}

// A calm leader ticks once per heartbeat.
//
// A leader's ticks between two heartbeats only count toward raft's
// CheckQuorum (an election timeout's worth) and run the loop's tick work.
// While it is calm — nothing of its own in flight, nothing left to commit to
// the lock table, no deadline near enough for the fine ticker — its ticker
// fires once per heartbeat interval and gives raft HeartbeatTicks ticks in
// one go, so raft still sends each heartbeat on time and counts the same
// election timeout. Session, lease and lock-delay deadlines are not late for
// it: the fine ticker takes over whenever one is within two coarse ticks
// (leaderCoarseTick), and expiring later than a deadline is always safe
// (S5 counts on the holder's side, which gives up earlier). Confirmation
// rounds ride on the heartbeat ticks as before (confirm.go).

// calmLeader reports whether this node leads and is calm (loop).
func (n *Node) calmLeader() bool {
	if !n.loop.isLeader || n.cfg.HeartbeatTicks < 2 || n.k.FollowerExpiry {
		return false
	}
	if n.loop.fine.c != nil || n.loop.fine.wanted || n.loop.fsmBusy || n.fsm.DurableIndex() != n.fsm.AppliedIndex() {
		return false
	}
	return n.nothingInFlight()
}

// coarsePeriod is the leader's current tick period: what its deadline
// horizon must look ahead of.
func (n *Node) coarsePeriod() time.Duration {
	return max(n.cfg.TickInterval, n.loop.tick.period)
}

// tickRaft is the ticker's tick: perFire raft ticks (one, or HeartbeatTicks
// on a calm leader), or, on the first tick after a quiet spell, as many as
// the clock says passed since the last one (the ticker that took over may
// first tick up to two periods after it started: clock.go).
func (n *Node) tickRaft(now time.Time) {
	t := &n.loop.tick
	k := max(1, t.perFire)
	if t.resync {
		t.resync = false
		k = max(1, int(now.Sub(t.last)/n.cfg.TickInterval))
	}
	for i := 0; i < k && (i == 0 || !n.rn.HasReady()); i++ {
		n.rn.Tick()
	}
	t.last = now
}
