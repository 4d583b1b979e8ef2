package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAlignedTickersShareWakeUps: tickers of one period started at
// different moments tick at the same instants (multiples of the period from
// the process origin), so that an idle replica's periodic work shares the
// runtime's wake-ups (clock.go); a stopped one ticks no more. Scheduling can
// only make a tick late, so each tick's phase is checked against a lateness
// bound, not for equality.
func TestAlignedTickersShareWakeUps(t *testing.T) {
	const d = 200 * time.Millisecond
	const late = 60 * time.Millisecond
	a, stopA := alignedTicker(time.Now(), d)
	time.Sleep(d / 3) // a different phase at creation
	b, stopB := alignedTicker(time.Now(), d)
	defer stopB()
	phase := func(at time.Time) time.Duration { return time.Duration(at.UnixNano() % int64(d)) }
	aligned := 0
	for i := 0; i < 6; i++ {
		var at time.Time
		select {
		case at = <-a:
		case at = <-b:
		}
		if i < 2 {
			continue // the first tick of each may precede the alignment
		}
		if phase(at) < late {
			aligned++
		}
		t.Logf("tick %d at phase %v", i, phase(at))
	}
	require.GreaterOrEqual(t, aligned, 3, "ticks should fall on multiples of the period from the origin")
	stopA()
	// Drain a tick that was already due, then a stopped ticker stays quiet.
	select {
	case <-a:
	default:
	}
	select {
	case <-a:
		t.Fatal("a stopped aligned ticker ticked")
	case <-time.After(3 * d):
	}
}

// TestTickPhaseIsSharedAcrossProcesses: a ticker's first tick falls on a
// multiple of its period in wall time, so two processes started at
// different moments (or on machines whose clocks agree) tick at the same
// instants, and their tickers' wake-ups fall together (clock.go).
func TestTickPhaseIsSharedAcrossProcesses(t *testing.T) {
	now := time.Now()
	// Two "processes": one started 37 min 12.345 s after the other.
	later := now.Add(37*time.Minute + 12345*time.Millisecond)
	for _, d := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 700 * time.Millisecond,
		time.Second, 2500 * time.Millisecond, 5 * time.Second} {
		for _, start := range []time.Time{now, later} {
			w := untilAligned(start, d)
			require.True(t, w > 0 && w <= d, "period %v: first tick after %v", d, w)
			first := start.Add(w)
			require.Zero(t, first.UnixNano()%int64(d), "period %v: the first tick is off the phase", d)
		}
	}
	// On a whole multiple the next tick is a full period away, not now.
	at := time.Unix(0, 0).Add(1000 * time.Second)
	require.Equal(t, time.Second, untilAligned(at, time.Second))
}
