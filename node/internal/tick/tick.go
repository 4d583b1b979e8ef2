// Package tick decides when one node's loop wakes for time alone: its raft
// ticker, a quiet follower's single timer, and the leader's fine ticker.
//
// A Ticker owns those timers and the policy that runs them. Its owner (the
// node's loop) calls every method from one goroutine: it waits on C and
// FineC, reports each fire (Fired), catches raft's ticks up before it steps
// anything (CatchUp), and after every turn lets the Ticker set its timers
// for the next one (Sync, SyncFine). What the policy needs to know about
// the node (is it light, who leads, is anything in flight) it asks its Host,
// only when it needs the answer.
//
// # An idle light member ticks slowly
//
// A light member (gossip, not in the raft configuration) keeps no raft
// state, so raft's tick does nothing for it; its own tick work is retrying
// what it has in flight (forwarded proposals, a session being opened or
// closed, asking for a leader) and the loop's catch-up on the holder
// deadlines. The deadlines themselves do not wait for a tick: each has a
// timer of its own that cancels the handles and asks the loop to catch up.
// So while a light member has nothing in flight and knows its leader, its
// loop wakes only every Config.LightIdle instead of ten times a second; any
// call, result or raft message that arrives wakes it as always, and the turn
// that queued work switches the ticker back.
//
// # A quiet follower does not tick
//
// A follower's raft tick only counts toward its election timeout, and a
// follower that hears its leader every heartbeat has that count reset each
// time: ten wake-ups a second that decide nothing, each costing the runtime
// several context switches; without them an idle follower of a 10-member
// fleet wakes half as often (211 → 111 context switches a second,
// 0.6 → 0.34 % of a core: bench/cmd/embedcost). So while a follower (or
// learner) is quiet — it hears its leader, has nothing in flight and nothing
// left to commit to the lock table — its ticks are counted from the clock
// instead: at every wake-up, before anything is stepped, raft is ticked once
// per whole tick interval that passed since the last tick it got (CatchUp).
// Raft then sees the same count at every message it steps as it would have
// with a ticker (to the tick), so its election timer, its CheckQuorum lease
// and a vote's answer are unchanged. Nothing wakes the loop for a tick,
// except one timer: Config.QuietFor after the leader was last heard, when the
// follower stops being quiet and ticks again every Interval. That is well
// before any election could fall due (the earliest is one election timeout
// after the last heartbeat), so it campaigns as soon as it would have.
//
// Not quiet: the leader, light members, candidates, a follower whose leader
// has been silent for QuietFor, one with proposals, reads, session work or a
// lock-table commit pending (their retries and the commit run on the tick),
// and Config.Always.
//
// # A calm leader ticks once per heartbeat
//
// A leader's ticks between two heartbeats only count toward raft's
// CheckQuorum (an election timeout's worth) and run the loop's tick work.
// While it is calm — nothing of its own in flight, nothing left to commit to
// the lock table, no deadline near enough for the fine ticker — its ticker
// fires once per heartbeat interval and gives raft HeartbeatTicks ticks in
// one go, so raft still sends each heartbeat on time and counts the same
// election timeout. Session, lease and lock-delay deadlines are not late for
// it: the fine ticker takes over whenever one is within two coarse ticks
// (the loop's WantFine), and expiring later than a deadline is always safe
// (S5 counts on the holder's side, which gives up earlier). Confirmation
// rounds ride on the heartbeat ticks as before.
//
// # A node that may campaign ticks on a phase of its own
//
// raft randomises each election timeout in whole ticks (ElectionTicks to
// 2×ElectionTicks−1: ten values by default), and a follower campaigns on the
// tick its count reaches it. If the followers tick in step, two that draw
// the same count campaign in the same instant, each becomes a candidate
// before the other's vote request arrives, both vote for themselves, and the
// vote is split: nobody leads until another randomised timeout runs out
// (and it can split again). In step is what they would be: the system
// clock's tickers fall on the same multiples of their period in every
// process whose clock agrees (node's systemClock), and a follower leaving a
// quiet spell would start its ticker when the leader's last heartbeat plus
// QuietFor came, the same moment on every follower. Measured in the
// simulation (chaos TestSimulationLeaderChurn, leader kills on 3 and 5
// members): one failover in ten had a split vote, and they made every
// leaderless stretch over two election timeouts (up to six).
//
// So a raft ticker made for a node that does not lead (follower,
// pre-candidate, candidate) fires first after a random part of a period
// (Config.Rand, drawn anew for each ticker) and every period from there, on
// AfterFunc timers counted from that first fire: each such node ticks on a
// phase of its own, as raft's own ticker would on machines started at
// random moments, and equal counts fall up to a tick apart instead of
// together. A leader's tickers (and a light member's) stay on the clock's
// shared multiples: their wake-ups are what the alignment saves, and
// whether a leader ticks in step with anyone decides no election. Nothing
// else changes: raft counts the same ticks at the same rate, the first tick
// after a quiet spell still catches up by the clock, and the election
// timeout's range and the CheckQuorum lease are raft's own.
//
// # The fine ticker
//
// The fine ticker (a tenth of a tick) lets the leader propose an expiry
// within ~10 ms of its deadline and answer a light member's held
// fwd-propose call on time. It used to run on every node all the time: 100
// wake-ups a second per replica, most of an idle replica's CPU
// (go run ./bench/cmd/embedcost). Now it runs only while it has work: on the
// leader while a deadline is less than two coarse ticks away or a light
// member's call is held, and always under Config.Always. Otherwise the
// leader checks its deadlines on the ordinary tick (once per heartbeat on a
// calm leader), which is at most one such tick later only for a lease
// shorter than two of them granted between two (expiry later than the
// deadline is always safe: S5 counts on the holder's side, which gives up
// earlier).
package tick

import (
	"sync"
	"time"
)

// Config is what a Ticker needs of the node's configuration.
type Config struct {
	Interval       time.Duration // one raft tick (TickInterval)
	HeartbeatTicks int           // raft ticks per heartbeat
	ElectionTicks  int           // raft ticks per election timeout
	// LightIdle is an idle light member's tick (at least Interval).
	LightIdle time.Duration
	// QuietFor is how long after the leader was last heard a follower stays
	// quiet; 0: never quiet.
	QuietFor time.Duration
	// Always keeps every tick: never quiet, calm or idle, and the fine
	// ticker always on (a planted bug that has followers expire sessions
	// needs them).
	Always bool

	// NewTicker, AfterFunc and Now are the node's Clock's.
	NewTicker func(d time.Duration) (<-chan time.Time, func())
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
	Now       func() time.Time
	// Rand, if set, draws uniformly from [0, n): the phase of a raft ticker
	// made for a node that does not lead (see "ticks on a phase of its
	// own"). Nil: every raft ticker comes from NewTicker.
	Rand func(n int64) int64
}

// heartbeat is the heartbeat interval.
func (c *Config) heartbeat() time.Duration { return time.Duration(c.HeartbeatTicks) * c.Interval }

// fine is the fine ticker's period.
func (c *Config) fine() time.Duration { return max(c.Interval/10, time.Millisecond) }

// Host is what the policy asks about the node, from the loop.
type Host interface {
	// Light: a light member (no raft state).
	Light() bool
	// Leader is the leader this node follows (0: none) and whether it is
	// this node.
	Leader() (id uint64, leading bool)
	// Settled: the lock table has nothing left to commit or restore.
	Settled() bool
	// Idle: the node's session is open and nothing the tick retries or
	// checks is in flight.
	Idle() bool
	// Holding: the leader holds a light member's call, to answer on a fine
	// tick.
	Holding() bool
}

// Raft is the raft node the Ticker ticks (a *raft.RawNode).
type Raft interface {
	Tick()
	HasReady() bool
}

// Ticker is the loop's timers and their policy.
type Ticker struct {
	cfg  Config
	host Host
	raft Raft

	// The raft ticker (or a quiet follower's timer: quiet).
	c      <-chan time.Time
	stop   func()
	period time.Duration // 0 while quiet
	phased bool          // the ticker is on a phase of its own (phasedTicker)
	// perFire: raft ticks per ticker tick (HeartbeatTicks on a calm
	// leader, else 1).
	perFire int
	last    time.Time // when raft was last ticked (a quiet follower's ticks are counted from it)
	// quiet: raft's ticks are counted from the clock (CatchUp) and c is
	// the timer that fires quietAt, QuietFor after the leader was last heard.
	quiet   bool
	resync  bool // the first tick after a quiet spell catches up by the clock
	quietAt time.Time
	heard   time.Time // the last heartbeat or append from the current leader

	// The fine ticker; fineC is nil while it is off.
	fineC    <-chan time.Time
	fineStop func()
	wanted   bool // a deadline is near (decided on each tick by the leader)
}

// New returns the Ticker of a node; its timers start with the first Sync.
func New(cfg Config, h Host, r Raft) *Ticker {
	return &Ticker{cfg: cfg, host: h, raft: r}
}

// C fires for the raft ticker, or once for a quiet follower's timer.
func (t *Ticker) C() <-chan time.Time { return t.c }

// FineC fires for the fine ticker; nil (never ready) while it is off.
func (t *Ticker) FineC() <-chan time.Time { return t.fineC }

// Quiet reports whether this node is a quiet follower.
func (t *Ticker) Quiet() bool { return t.quiet }

// Period is the raft ticker's current period (0 while quiet).
func (t *Ticker) Period() time.Duration { return t.period }

// CoarsePeriod is the leader's current tick period: what its deadline
// horizon must look ahead of.
func (t *Ticker) CoarsePeriod() time.Duration { return max(t.cfg.Interval, t.period) }

// FineRunning reports whether the fine ticker is on.
func (t *Ticker) FineRunning() bool { return t.fineC != nil }

// WantFine says whether a deadline is near enough for the fine ticker
// (the leader decides on each tick; SyncFine acts on it).
func (t *Ticker) WantFine(w bool) { t.wanted = w }

// Fired handles a fire of C at now. A quiet follower's timer catches raft's
// ticks up (the turn's Sync goes back to ticking): ok is false. Otherwise
// raft is ticked, and beat says whether this tick made raft send its
// heartbeats: a leader with nothing else pending has a Ready after a tick
// only when the heartbeat fell due (or CheckQuorum changed its state); with
// something pending it cannot tell, and says yes.
func (t *Ticker) Fired(now time.Time) (beat, ok bool) {
	if t.quiet {
		t.CatchUp(now)
		t.c = nil
		return false, false
	}
	pending := t.raft.HasReady()
	t.tickRaft(now)
	return pending || t.raft.HasReady(), true
}

// tickRaft is the ticker's tick: perFire raft ticks (one, or HeartbeatTicks
// on a calm leader), or, on the first tick after a quiet spell, as many as
// the clock says passed since the last one (the ticker that took over may
// first tick up to two periods after it started).
func (t *Ticker) tickRaft(now time.Time) {
	k := max(1, t.perFire)
	if t.resync {
		t.resync = false
		k = max(1, int(now.Sub(t.last)/t.cfg.Interval))
	}
	for i := 0; i < k && (i == 0 || !t.raft.HasReady()); i++ {
		t.raft.Tick()
	}
	t.last = now
}

// NoteHeard records a heartbeat or append from from, if it is the leader.
func (t *Ticker) NoteHeard(from uint64, now time.Time) {
	if lead, _ := t.host.Leader(); from != 0 && from == lead {
		t.heard = now
	}
}

// CatchUp ticks raft once per tick interval elapsed since its last tick, if
// the node is quiet. It stops early if raft acts (an election falling due
// makes a Ready): the ticks after that would belong to a candidate, which a
// ticker would not have given it in one go.
func (t *Ticker) CatchUp(now time.Time) {
	if !t.quiet {
		return
	}
	if now.Before(t.last) {
		t.last = now // a clock that went back (chaos's badclock): count from here
		return
	}
	k := int(now.Sub(t.last) / t.cfg.Interval)
	if k >= t.cfg.ElectionTicks {
		// The loop itself stalled (a paused process, a long fsync, a clock
		// jump): the messages waiting now arrived meanwhile. Give raft no
		// more than a ticker would have left it — short of an election —
		// rather than a campaign against a leader that was heard all along.
		// The quiet timer keeps its promise: past QuietFor the ticker
		// takes over.
		for i := 0; i < t.cfg.ElectionTicks-1 && !t.raft.HasReady(); i++ {
			t.raft.Tick()
		}
		t.last = now
		return
	}
	i := 0
	for ; i < k && !t.raft.HasReady(); i++ {
		t.raft.Tick()
	}
	if i < k {
		t.last = now
		return
	}
	t.last = t.last.Add(time.Duration(k) * t.cfg.Interval)
}

// Sync sets the ticker's period for the next turn, or the quiet follower's
// timer.
func (t *Ticker) Sync(now time.Time) {
	if t.quietNow(now) {
		if !t.quiet {
			t.quiet = true
			t.stopRaftTicker()
		}
		t.syncQuiet(now)
		return
	}
	if t.quiet {
		// Leaving: raft's ticks were caught up at this turn's start; the
		// ticker takes over from here, its first tick catching up too.
		t.quiet, t.resync = false, true
		t.stopRaftTicker()
	}
	want, per := t.cfg.Interval, 1
	if t.lightIdle() {
		want = t.cfg.LightIdle
	} else if t.calmLeader() {
		per = t.cfg.HeartbeatTicks
		want = t.cfg.heartbeat()
	}
	t.perFire = per
	phased := t.ownPhase()
	if t.c != nil && t.period == want && t.phased == phased {
		return
	}
	if t.stop != nil {
		t.stop()
	}
	if phased {
		t.c, t.stop = phasedTicker(t.cfg.Now, t.cfg.AfterFunc, time.Duration(1+t.cfg.Rand(int64(want))), want)
	} else {
		t.c, t.stop = t.cfg.NewTicker(want)
	}
	t.period, t.phased = want, phased
}

// ownPhase reports whether the raft ticker should tick on a phase of its
// own: this node may campaign (it does not lead, it is not light) and
// Config.Rand is set.
func (t *Ticker) ownPhase() bool {
	if t.cfg.Rand == nil || t.cfg.Now == nil || t.host.Light() {
		return false
	}
	_, leading := t.host.Leader()
	return !leading
}

// phasedTicker fires first after `first` and then every d from that fire
// on, each fire at its planned time on the clock (not one period after the
// previous fire ran, so a late timer does not make later ticks late); fires
// a slow receiver misses are dropped, as a time.Ticker drops them.
func phasedTicker(now func() time.Time, after func(time.Duration, func()) func() bool, first, d time.Duration) (<-chan time.Time, func()) {
	c := make(chan time.Time, 1)
	var mu sync.Mutex
	stopped := false
	next := now().Add(first)
	var stop func() bool
	var fire func()
	fire = func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		at := now()
		select {
		case c <- at:
		default:
		}
		for !next.After(at) {
			next = next.Add(d)
		}
		stop = after(next.Sub(at), fire)
	}
	mu.Lock()
	stop = after(first, fire)
	mu.Unlock()
	return c, func() {
		mu.Lock()
		stopped = true
		stop()
		mu.Unlock()
	}
}

func (t *Ticker) stopRaftTicker() {
	if t.stop != nil {
		t.stop()
	}
	t.c, t.stop = nil, nil
}

// quietNow reports whether this node is a quiet follower now.
func (t *Ticker) quietNow(now time.Time) bool {
	q := t.cfg.QuietFor
	if q == 0 || t.cfg.Always || t.host.Light() {
		return false
	}
	if lead, leading := t.host.Leader(); leading || lead == 0 {
		return false
	}
	if now.Sub(t.heard) >= q || !t.host.Settled() {
		return false
	}
	return t.host.Idle() && !t.raft.HasReady()
}

// syncQuiet arms or moves the quiet follower's one timer: it fires QuietFor
// after the leader was last heard. Each heartbeat moves it on, so while the
// leader is heard it never fires.
func (t *Ticker) syncQuiet(now time.Time) {
	at := t.heard.Add(t.cfg.QuietFor)
	if t.c != nil && at.Equal(t.quietAt) {
		return
	}
	if t.stop != nil {
		t.stop()
	}
	c := make(chan time.Time, 1)
	stop := t.cfg.AfterFunc(at.Sub(now), func() {
		select {
		case c <- time.Now():
		default:
		}
	})
	t.c, t.stop, t.quietAt, t.period = c, func() { stop() }, at, 0
}

// lightIdle reports whether this node is a light member with nothing in
// flight that the tick retries.
func (t *Ticker) lightIdle() bool {
	if t.cfg.Always || !t.host.Light() {
		return false
	}
	lead, _ := t.host.Leader()
	return lead != 0 && t.host.Idle()
}

// calmLeader reports whether this node leads and is calm.
func (t *Ticker) calmLeader() bool {
	if _, leading := t.host.Leader(); !leading || t.cfg.HeartbeatTicks < 2 || t.cfg.Always {
		return false
	}
	if t.fineC != nil || t.wanted || !t.host.Settled() {
		return false
	}
	return t.host.Idle()
}

// SyncFine starts or stops the fine ticker after a loop turn.
func (t *Ticker) SyncFine() {
	on := t.cfg.Always
	if !on {
		_, leading := t.host.Leader()
		on = leading && (t.wanted || t.host.Holding())
	}
	switch {
	case on && t.fineC == nil:
		t.fineC, t.fineStop = t.cfg.NewTicker(t.cfg.fine())
	case !on && t.fineC != nil:
		t.fineStop()
		t.fineC, t.fineStop = nil, nil
	}
}

// Stop stops every timer for good (the loop is exiting).
func (t *Ticker) Stop() {
	t.stopRaftTicker()
	if t.fineStop != nil {
		t.fineStop()
		t.fineC, t.fineStop = nil, nil
	}
}
