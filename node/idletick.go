package node

import "time"

// An idle light member ticks slowly.
//
// A light member (gossip, not in the raft configuration: fwd.go) keeps no
// raft state, so raft's tick does nothing for it; its own tick work is
// retrying what it has in flight (forwarded proposals, a session being
// opened or closed, asking for a leader) and the loop's catch-up on the
// holder deadlines. The deadlines themselves do not wait for a tick: each
// has a timer of its own (holder.go, S5) that cancels the handles and asks
// the loop to catch up. So while a light member has nothing in flight and
// knows its leader, its loop wakes only every lightIdleTick instead of ten
// times a second; any call, result or raft message that arrives wakes it as
// always, and the turn that queued work switches the ticker back.

// tickState is the loop's raft ticker and its current period, or a quiet
// follower's timer (quiettick.go).
type tickState struct {
	c      <-chan time.Time
	stop   func()
	period time.Duration // 0 while quiet
	// perFire: raft ticks per ticker tick (HeartbeatTicks on a calm
	// leader: quiettick.go; else 1).
	perFire int
	last    time.Time // when raft was last ticked (a quiet follower's ticks are counted from it)
	// quiet: raft's ticks are counted from the clock (catchUpTicks) and c is
	// the timer that fires quietAt, quietFor after the leader was last heard.
	quiet   bool
	resync  bool // the first tick after a quiet spell catches up by the clock
	quietAt time.Time
	heard   time.Time // the last heartbeat or append from the current leader
}

// lightIdleTick is the idle light member's tick: the keepalive interval
// (at least one tick), so it wakes no more often than it sends keepalives.
func (n *Node) lightIdleTick() time.Duration {
	return max(n.cfg.TickInterval, n.cfg.KeepaliveInterval)
}

// lightIdle reports whether this node is a light member with nothing in
// flight that the tick retries (loop).
func (n *Node) lightIdle() bool {
	if !n.light() || n.k.FollowerExpiry {
		return false
	}
	return n.loop.leader != 0 && n.nothingInFlight()
}

// nothingInFlight: an open session, and nothing that the tick retries or
// checks (loop).
func (n *Node) nothingInFlight() bool {
	s, r := &n.loop.own, &n.loop.ops
	return s.id != 0 && !s.closing && len(s.toClose) == 0 && len(s.leased) == 0 &&
		len(r.inflight) == 0 && len(r.queued) == 0 && len(n.loop.reads.next)+len(n.loop.reads.rounds)+len(n.loop.reads.ready) == 0 &&
		!n.fwd.Forwarding()
}

// syncTick sets the ticker's period for the next turn, or the quiet
// follower's timer (loop).
func (n *Node) syncTick() {
	t := &n.loop.tick
	now := n.clock.Now()
	if n.quiet(now) {
		if !t.quiet {
			t.quiet = true
			if t.stop != nil {
				t.stop()
			}
			t.c, t.stop = nil, nil
		}
		n.syncQuiet(now)
		return
	}
	if t.quiet {
		// Leaving: raft's ticks were caught up at this turn's start; the
		// ticker takes over from here, its first tick catching up too.
		t.quiet, t.resync = false, true
		if t.stop != nil {
			t.stop()
		}
		t.c, t.stop = nil, nil
	}
	want, per := n.cfg.TickInterval, 1
	if n.lightIdle() {
		want = n.lightIdleTick()
	} else if n.calmLeader() {
		per = n.cfg.HeartbeatTicks
		want = n.cfg.heartbeatInterval()
	}
	t.perFire = per
	if t.c != nil && t.period == want {
		return
	}
	if t.stop != nil {
		t.stop()
	}
	t.c, t.stop = n.clock.NewTicker(want)
	t.period = want
}

// stopTick stops the ticker for good (the loop is exiting).
func (n *Node) stopTick() {
	if t := &n.loop.tick; t.stop != nil {
		t.stop()
		t.c, t.stop = nil, nil
	}
}
