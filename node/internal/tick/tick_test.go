package tick

import (
	"testing"
	"time"
)

// host is a node as the policy sees it; raft counts ticks and can be made
// to have a Ready after a given tick.
type host struct {
	light, leading, settled, idle, holding bool
	leader                                 uint64

	ticks, readyAt int // readyAt > 0: HasReady from that tick on
}

func (h *host) Light() bool                 { return h.light }
func (h *host) Leader() (uint64, bool)      { return h.leader, h.leading }
func (h *host) Settled() bool               { return h.settled }
func (h *host) Idle() bool                  { return h.idle }
func (h *host) Holding() bool               { return h.holding }
func (h *host) Tick()                       { h.ticks++ }
func (h *host) HasReady() bool              { return h.readyAt > 0 && h.ticks >= h.readyAt }
func (h *host) follower(leader uint64) bool { h.leader, h.leading = leader, false; return true }

// timers records what the Ticker arms.
type timers struct {
	tickers []time.Duration
	after   []time.Duration
	stopped int
}

func newTicker(h *host, tm *timers, always bool) *Ticker {
	return New(Config{
		Interval: 100 * time.Millisecond, HeartbeatTicks: 2, ElectionTicks: 10,
		LightIdle: time.Second, QuietFor: 400 * time.Millisecond, Always: always,
		NewTicker: func(d time.Duration) (<-chan time.Time, func()) {
			tm.tickers = append(tm.tickers, d)
			return make(chan time.Time), func() { tm.stopped++ }
		},
		AfterFunc: func(d time.Duration, f func()) func() bool {
			tm.after = append(tm.after, d)
			return func() bool { tm.stopped++; return true }
		},
	}, h, h)
}

// quietAt makes h's follower quiet at t0, after one raft tick at t0.
func quietAt(t *testing.T, h *host, tk *Ticker, t0 time.Time) {
	t.Helper()
	h.follower(2)
	h.idle = true
	tk.Sync(t0)
	if _, ok := tk.Fired(t0); !ok || h.ticks != 1 {
		t.Fatalf("a busy follower ticks: ok %v, %d ticks", ok, h.ticks)
	}
	h.settled = true
	tk.NoteHeard(2, t0)
	tk.Sync(t0)
}

func TestQuietFollowerCountsTicksFromTheClock(t *testing.T) {
	h := &host{}
	tm := &timers{}
	tk := newTicker(h, tm, false)
	t0 := time.Unix(1000, 0)
	quietAt(t, h, tk, t0)
	if !tk.Quiet() || tk.Period() != 0 {
		t.Fatalf("a settled, idle follower that hears its leader is quiet (quiet %v, period %v)", tk.Quiet(), tk.Period())
	}
	if len(tm.after) != 1 || tm.after[0] != 400*time.Millisecond {
		t.Fatalf("its one timer fires QuietFor after the leader was heard: %v", tm.after)
	}
	tk.CatchUp(t0.Add(350 * time.Millisecond))
	if h.ticks != 1+3 {
		t.Fatalf("350 ms at 100 ms a tick: 3 ticks caught up, got %d", h.ticks-1)
	}
	tk.CatchUp(t0.Add(420 * time.Millisecond))
	if h.ticks != 1+4 {
		t.Fatalf("the remainder carries over: 4 ticks by 420 ms, got %d", h.ticks-1)
	}
	// A stalled loop gives raft no more than a ticker would have: short of
	// an election.
	tk.CatchUp(t0.Add(5 * time.Second))
	if h.ticks != 5+9 {
		t.Fatalf("a stall catches up ElectionTicks-1 ticks, got %d", h.ticks-5)
	}
	// Raft acting (an election falling due) ends the catch-up.
	h.readyAt = h.ticks + 2
	tk.CatchUp(t0.Add(6 * time.Second))
	if h.ticks != 14+2 {
		t.Fatalf("catch-up stops at raft's Ready: %d ticks, want 2", h.ticks-14)
	}
	h.readyAt = 0
	// A heartbeat not from the leader does not move the timer.
	tk.NoteHeard(3, t0.Add(6*time.Second))
	tk.Sync(t0.Add(6 * time.Second))
	if tk.Quiet() {
		t.Fatal("a follower whose leader has been silent for QuietFor ticks again")
	}
	if got := tm.tickers[len(tm.tickers)-1]; got != 100*time.Millisecond {
		t.Fatalf("back to the raft tick: %v", got)
	}
}

func TestQuietFiredCatchesUpAndReturnsToTicking(t *testing.T) {
	h := &host{}
	tk := newTicker(h, &timers{}, false)
	t0 := time.Unix(1000, 0)
	quietAt(t, h, tk, t0)
	if _, ok := tk.Fired(t0.Add(400 * time.Millisecond)); ok || h.ticks != 1+4 || tk.C() != nil {
		t.Fatalf("the quiet timer catches up (4 ticks, got %d) and is spent (ok %v)", h.ticks-1, ok)
	}
	h.settled = false
	tk.Sync(t0.Add(400 * time.Millisecond))
	if tk.Quiet() {
		t.Fatal("a follower with lock-table work is not quiet")
	}
	// The first tick after a quiet spell catches up by the clock.
	if beat, ok := tk.Fired(t0.Add(700 * time.Millisecond)); !ok || beat {
		t.Fatalf("a tick with nothing ready: beat %v, ok %v", beat, ok)
	}
	if h.ticks != 5+3 {
		t.Fatalf("300 ms after the last tick: 3 more, got %d", h.ticks-5)
	}
}

func TestCalmLeaderTicksOncePerHeartbeat(t *testing.T) {
	h := &host{leading: true, leader: 1, settled: true, idle: true}
	tm := &timers{}
	tk := newTicker(h, tm, false)
	now := time.Unix(1000, 0)
	tk.Sync(now)
	if tk.Period() != 200*time.Millisecond || tk.CoarsePeriod() != 200*time.Millisecond {
		t.Fatalf("a calm leader ticks every heartbeat: %v", tk.Period())
	}
	tk.Fired(now.Add(200 * time.Millisecond))
	if h.ticks != 2 {
		t.Fatalf("HeartbeatTicks raft ticks per fire, got %d", h.ticks)
	}
	tk.WantFine(true)
	tk.SyncFine()
	tk.Sync(now)
	if !tk.FineRunning() || tk.Period() != 100*time.Millisecond {
		t.Fatalf("a near deadline: fine ticker on (%v) and every tick (%v)", tk.FineRunning(), tk.Period())
	}
	tk.WantFine(false)
	tk.SyncFine()
	if tk.FineRunning() {
		t.Fatal("fine ticker off once no deadline is near")
	}
	h.holding = true
	tk.SyncFine()
	if !tk.FineRunning() {
		t.Fatal("a held light member's call keeps the fine ticker on")
	}
	tk.Stop()
	if tk.FineRunning() || tk.C() != nil {
		t.Fatal("Stop stops both")
	}
}

func TestIdleLightMemberTicksSlowly(t *testing.T) {
	h := &host{light: true, leader: 1, idle: true}
	tk := newTicker(h, &timers{}, false)
	tk.Sync(time.Unix(1000, 0))
	if tk.Period() != time.Second || tk.Quiet() {
		t.Fatalf("an idle light member ticks every LightIdle: %v (quiet %v)", tk.Period(), tk.Quiet())
	}
	h.idle = false
	tk.Sync(time.Unix(1000, 0))
	if tk.Period() != 100*time.Millisecond {
		t.Fatalf("work in flight: every tick again, got %v", tk.Period())
	}
}

func TestAlwaysKeepsEveryTick(t *testing.T) {
	h := &host{settled: true, idle: true}
	h.follower(2)
	tk := newTicker(h, &timers{}, true)
	now := time.Unix(1000, 0)
	tk.NoteHeard(2, now)
	tk.Sync(now)
	tk.SyncFine()
	if tk.Quiet() || tk.Period() != 100*time.Millisecond || !tk.FineRunning() {
		t.Fatalf("Always: quiet %v, period %v, fine %v", tk.Quiet(), tk.Period(), tk.FineRunning())
	}
}
