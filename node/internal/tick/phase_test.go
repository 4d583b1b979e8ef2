package tick

import (
	"testing"
	"time"
)

// fakeTimers is a clock whose AfterFunc timers run when the test advances
// it.
type fakeTimers struct {
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func (c *fakeTimers) Now() time.Time { return c.now }

func (c *fakeTimers) AfterFunc(d time.Duration, f func()) func() bool {
	tm := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, tm)
	return func() bool { s := !tm.stopped; tm.stopped = true; return s }
}

// advance moves the clock to t, running each due timer at its time, or
// late by lag.
func (c *fakeTimers) advance(t time.Time, lag time.Duration) {
	for {
		var next *fakeTimer
		for _, tm := range c.timers {
			if !tm.stopped && !tm.at.After(t) && (next == nil || tm.at.Before(next.at)) {
				next = tm
			}
		}
		if next == nil {
			c.now = t
			return
		}
		next.stopped = true
		c.now = next.at.Add(lag)
		next.f()
	}
}

// A node that may campaign ticks on a phase of its own, drawn for each
// ticker; a leader's ticker and a light member's come from NewTicker.
func TestCampaignerTicksOnItsOwnPhase(t *testing.T) {
	h := &host{}
	h.follower(2)
	tm := &timers{}
	fc := &fakeTimers{now: time.Unix(1000, 0)}
	var draws []int64
	cfg := Config{Interval: 100 * time.Millisecond, HeartbeatTicks: 2, ElectionTicks: 10,
		LightIdle: time.Second, QuietFor: 400 * time.Millisecond,
		NewTicker: func(d time.Duration) (<-chan time.Time, func()) {
			tm.tickers = append(tm.tickers, d)
			return make(chan time.Time), func() {}
		},
		AfterFunc: fc.AfterFunc, Now: fc.Now,
		Rand: func(n int64) int64 { draws = append(draws, n); return 37 * int64(time.Millisecond) },
	}
	tk := New(cfg, h, h)
	tk.Sync(fc.now)
	if len(tm.tickers) != 0 || len(draws) != 1 || draws[0] != int64(100*time.Millisecond) {
		t.Fatalf("a follower's ticker: NewTicker %v, draws %v", tm.tickers, draws)
	}
	if len(fc.timers) != 1 || fc.timers[0].at.Sub(fc.now) != 37*time.Millisecond+1 {
		t.Fatalf("its first tick after the drawn phase: %v", fc.timers)
	}
	h.leading, h.leader = true, 1
	tk.Sync(fc.now)
	if len(tm.tickers) != 1 || !fc.timers[0].stopped {
		t.Fatalf("a leader's ticker comes from NewTicker (%v), the phased one stops (%v)", tm.tickers, fc.timers[0].stopped)
	}
	h.leading, h.leader = false, 0
	tk.Sync(fc.now)
	if len(draws) != 2 || len(tm.tickers) != 1 {
		t.Fatalf("stepping down: a new phase (draws %v, NewTicker %v)", draws, tm.tickers)
	}
	h.light, h.leader = true, 1
	tk.Sync(fc.now)
	if len(tm.tickers) != 2 {
		t.Fatalf("a light member's ticker comes from NewTicker: %v", tm.tickers)
	}
}

// The phased ticker fires at its planned times, a late timer making no
// later tick late, and drops what its receiver misses.
func TestPhasedTickerKeepsItsPlan(t *testing.T) {
	t0 := time.Unix(1000, 0)
	fc := &fakeTimers{now: t0}
	c, stop := phasedTicker(fc.Now, fc.AfterFunc, 30*time.Millisecond, 100*time.Millisecond)
	var got []time.Duration
	for _, until := range []time.Duration{30, 130, 230, 330} {
		fc.advance(t0.Add(until*time.Millisecond), 7*time.Millisecond)
		select {
		case at := <-c:
			got = append(got, at.Sub(t0))
		default:
			t.Fatalf("no tick by %v", until)
		}
	}
	want := []time.Duration{37, 137, 237, 337}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("ticks at %v, want %v ms (each 7 ms late, none later)", got, want)
		}
	}
	fc.advance(t0.Add(1030*time.Millisecond), 0)
	if len(c) != 1 {
		t.Fatalf("a receiver that misses ticks gets one: %d", len(c))
	}
	<-c
	stop()
	fc.advance(t0.Add(2*time.Second), 0)
	if len(c) != 0 {
		t.Fatal("no tick after stop")
	}
}
