package node

import (
	"sync"
	"time"
)

// Clock is the node's source of time. Only the node loop, keepalive sender,
// the holder-side timers and the leader's expiry timers read it; lockfsm
// never does. Tests inject a clock whose wall reading steps and whose
// monotonic reading runs at a skewed rate, to check that safety never rests
// on the wall clock nor on clock agreement beyond DriftRatio.
//
// The node compares only Times read from Now and kept whole (never stored as
// UnixNano or rebuilt with time.Unix, which drops the monotonic reading), so
// every deadline is on the monotonic clock and a wall-clock step changes
// nothing.
//
// Implementations must be safe for concurrent use. Now must carry a
// monotonic reading (time.Now's does) that never goes back; its wall reading
// may step anywhere. NewTicker returns a channel that receives at roughly the
// given interval of monotonic time and a stop function. AfterFunc calls f in
// its own goroutine once d of monotonic time has passed; stop prevents the
// call if it has not started and reports whether it did (as time.Timer.Stop).
type Clock interface {
	Now() time.Time
	NewTicker(d time.Duration) (<-chan time.Time, func())
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// systemClock is the real monotonic clock.
type systemClock struct{}

// Now returns time.Now(), which carries a monotonic reading.
func (systemClock) Now() time.Time { return time.Now() }

// NewTicker is a time.Ticker; from a tenth of a second up its ticks fall
// on multiples of d in wall time (alignedTicker).
func (systemClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	if d >= alignFrom {
		return alignedTicker(time.Now(), d)
	}
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// An idle replica's CPU is the Go runtime waking up (bench/cmd/embedcost):
// each wake-up costs the runtime a handful of context switches (the timer's
// thread, a spinning thread, sysmon) whatever it runs. Tickers that fall due
// at the same instant share one. So the node's periodic tickers (the raft
// tick, the keepalive sender, the gossip goroutine, an idle light member's
// tick) tick on multiples of their period in wall time (counted from the
// Unix epoch): a 1 s ticker fires together with every tenth 100 ms tick,
// and three 1 s tickers cost one wake-up instead of three. Only the phase
// moves; the period is d, and the first tick comes within 2d.
//
// The phase is the same in every process whose wall clock agrees, and for
// every ticker whenever it was made. That matters at a leader: its light
// members' keepalives (one each per KeepaliveInterval) used to arrive one at
// a time, each waking it on its own; now they arrive together, one burst per
// interval, and share its wake-ups (a fleet of 50's leader: 1.62 → 0.94 % of
// a core, 305 → 180 wake-ups a second). A burst is small (a keepalive is one
// short call); machines whose clocks disagree by a few milliseconds spread
// it over those milliseconds. Spreading the keepalives over slots a
// heartbeat apart was measured in a fleet of 300 (bench/cmd/fleet, one
// run each): the leader spent 6.2 % of a core against 4.1 % with one
// burst, and 1,138 wake-ups a second against 543, with the keepalives'
// round trips no different; so they stay on one phase. The wall clock is read once per ticker, for
// the phase only: the ticks themselves run on the monotonic clock, and no
// deadline depends on when they fall. A Clock other than systemClock (a
// test's, the simulation's) decides its own phases.
const alignFrom = 100 * time.Millisecond

// untilAligned is how long from now until the next multiple of d in wall
// time: in (0, d].
func untilAligned(now time.Time, d time.Duration) time.Duration {
	return d - time.Duration(now.UnixNano()%int64(d))
}

// alignedTicker ticks every d, on multiples of d in wall time from the
// first one after now on.
func alignedTicker(now time.Time, d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	var mu sync.Mutex
	stopped := false
	align := time.AfterFunc(untilAligned(now, d), func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			t.Reset(d) // from now on: multiples of d
		}
	})
	return t.C, func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
		align.Stop()
	}
}

// AfterFunc wraps time.AfterFunc (Go's timers run on the monotonic clock).
func (systemClock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	return time.AfterFunc(d, f).Stop
}
