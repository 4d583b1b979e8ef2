package cluster

import (
	"strings"
	"testing"
	"time"
)

// The harness's own guard (S5 tests rest on it): a wall step moves the wall
// reading only, and a Time built that way still compares by its monotonic
// reading. If a Go release changes time.Time's layout, stepWall panics and
// this test fails.
func TestSkewClockWallStepKeepsMonotonic(t *testing.T) {
	for _, step := range []time.Duration{-60 * time.Second, 2 * time.Hour, -30 * 24 * time.Hour, time.Nanosecond} {
		c := NewSkewClock()
		before := c.Now()
		deadline := before.Add(time.Hour) // a deadline kept whole, as node code must keep it
		c.StepWall(step)
		after := c.Now()
		if !strings.Contains(after.String(), "m=+") {
			t.Fatalf("step %v: %v has no monotonic reading", step, after)
		}
		if el := after.Sub(before); el < 0 || el > time.Second {
			t.Fatalf("step %v moved the monotonic reading: %v elapsed", step, el)
		}
		if wall := after.Round(0).Sub(before.Round(0)); wall < step || wall > step+time.Second {
			t.Fatalf("step %v: wall reading moved by %v", step, wall)
		}
		if after.After(deadline) {
			t.Fatalf("step %v: a whole deadline an hour ahead looks passed", step)
		}
		passed := before.Add(-time.Second)
		if !after.After(passed) {
			t.Fatalf("step %v: a whole deadline a second ago looks ahead", step)
		}
		// What deadlines rebuilt with time.Unix see: the wall clock.
		if wallOnly := time.Unix(0, passed.UnixNano()); step < -time.Second && after.After(wallOnly) {
			t.Fatalf("step %v: a wall-only deadline should look ahead after the step", step)
		}
		if wallOnly := time.Unix(0, deadline.UnixNano()); step > time.Hour && !after.After(wallOnly) {
			t.Fatalf("step %v: a wall-only deadline an hour ahead should look passed", step)
		}
		if got := c.WallOffset(); got != step {
			t.Fatalf("WallOffset %v, want %v", got, step)
		}
	}
	// A Time without a monotonic reading cannot be stepped: loud failure.
	defer func() {
		if recover() == nil {
			t.Fatal("stepWall of a Time without a monotonic reading did not panic")
		}
	}()
	stepWall(time.Now().Round(0), time.Second)
}

// A rate skew moves both readings: at rate 4, 50 ms of real time is about
// 200 ms on both.
func TestSkewClockRateMovesBoth(t *testing.T) {
	c := NewSkewClock()
	c.SetRate(4)
	r0, v0 := time.Now(), c.Now()
	time.Sleep(50 * time.Millisecond)
	real := time.Since(r0)
	v1 := c.Now()
	mono, wall := v1.Sub(v0), v1.Round(0).Sub(v0.Round(0))
	t.Logf("real %v: virtual monotonic %v, wall %v", real, mono, wall)
	for name, d := range map[string]time.Duration{"monotonic": mono, "wall": wall} {
		if d < 4*real-20*time.Millisecond || d > 4*real+20*time.Millisecond {
			t.Fatalf("%s reading advanced %v in %v of real time at rate 4", name, d, real)
		}
	}
}

// Timers run on the virtual monotonic clock: a wall step fires nothing, a
// forward Jump fires a due timer at once, Stop prevents the call.
func TestSkewClockAfterFunc(t *testing.T) {
	c := NewSkewClock()
	fired := make(chan struct{})
	c.AfterFunc(time.Hour, func() { close(fired) })
	c.StepWall(2 * time.Hour)
	select {
	case <-fired:
		t.Fatal("a wall step fired an hour's timer")
	case <-time.After(50 * time.Millisecond):
	}
	c.Jump(2 * time.Hour)
	select {
	case <-fired:
	case <-time.After(5 * time.Second):
		t.Fatal("a monotonic jump past the timer did not fire it")
	}
	never := make(chan struct{})
	stop := c.AfterFunc(30*time.Millisecond, func() { close(never) })
	if !stop() {
		t.Fatal("Stop of a pending timer reported false")
	}
	select {
	case <-never:
		t.Fatal("a stopped timer fired")
	case <-time.After(100 * time.Millisecond):
	}
	// At rate 10, 500 ms of virtual time is about 50 ms of real time.
	c.SetRate(10)
	start := time.Now()
	done := make(chan struct{})
	c.AfterFunc(500*time.Millisecond, func() { close(done) })
	select {
	case <-done:
		t.Logf("500 ms at rate 10 took %v", time.Since(start))
	case <-time.After(400 * time.Millisecond):
		t.Fatal("a timer at rate 10 did not run ten times faster")
	}
}
