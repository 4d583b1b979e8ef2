package node

import "time"

// The fine ticker (a tenth of a tick) lets the leader propose an expiry
// within ~10 ms of its deadline and answer a light member's held
// fwd-propose call on time. It used to run on every node all the time: 100
// wake-ups a second per replica, most of an idle replica's CPU
// (go run ./bench/cmd/embedcost). Now it runs only while it has work: on the
// leader while a deadline is less than two coarse ticks away or a light
// member's call is held, and always under TestHooks.FollowerExpiry.
// Otherwise the leader checks its deadlines on the ordinary tick (once per
// heartbeat on a calm leader: quiettick.go), which is at most one such tick
// later only for a lease shorter than two of them granted between two
// (expiry later than the deadline is always safe: S5 counts on the holder's
// side, which gives up earlier).

// fineTicker is the loop's fine ticker; c is nil while it is off.
type fineTicker struct {
	c      <-chan time.Time
	stop   func()
	wanted bool // a deadline is near (decided on each tick by the leader)
}

// fineInterval is the fine ticker's period.
func (n *Node) fineInterval() time.Duration { return max(n.cfg.TickInterval/10, time.Millisecond) }

// syncFineTicker starts or stops the fine ticker after a loop turn.
func (n *Node) syncFineTicker() {
	f := &n.loop.fine
	on := n.k.FollowerExpiry ||
		(n.loop.isLeader && (f.wanted || n.fwd.Holding()))
	switch {
	case on && f.c == nil:
		f.c, f.stop = n.clock.NewTicker(n.fineInterval())
	case !on && f.c != nil:
		f.stop()
		f.c, f.stop = nil, nil
	}
}

// stopFineTicker stops it for good (the loop is exiting).
func (n *Node) stopFineTicker() {
	if f := &n.loop.fine; f.stop != nil {
		f.stop()
		f.c, f.stop = nil, nil
	}
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
	f := &n.loop.fine
	n.notePeerActivity(now)
	if !n.loop.isLeader {
		f.wanted = false
		return
	}
	if f.c == nil {
		n.proposeAll(n.loop.lease.Tick(now))
		n.fwd.ExpireReplies(now)
	}
	horizon := now.Add(2 * n.coarsePeriod()) // a calm leader ticks once per heartbeat (quiettick.go)
	f.wanted = n.loop.lease.DeadlineBefore(horizon)
}
