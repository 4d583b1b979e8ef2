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
	a, stopA := alignedTicker(d)
	time.Sleep(d / 3) // a different phase at creation
	b, stopB := alignedTicker(d)
	defer stopB()
	phase := func(at time.Time) time.Duration { return at.Sub(tickOrigin) % d }
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

// TestTickOriginIsSharedAcrossProcesses: the tick origin is the last whole
// hour of wall time, so two processes started at different moments (or on
// machines whose clocks agree) tick at the same instants for every period
// that divides an hour — the keepalive interval among them — and their
// tickers' wake-ups fall together (clock.go). The origin keeps the
// monotonic reading of the time it was taken from, so ticks and deadlines
// measured from it are unaffected by a later wall-clock step.
func TestTickOriginIsSharedAcrossProcesses(t *testing.T) {
	now := time.Now()
	o := lastWholeHour(now)
	require.Zero(t, o.UnixNano()%int64(time.Hour), "origin %v is not a whole hour", o)
	require.False(t, o.After(now))
	require.Less(t, now.Sub(o), time.Hour)
	require.Equal(t, now.Round(0).Sub(o.Round(0)), now.Sub(o), "wall and monotonic offsets differ")
	require.NotEqual(t, o.String(), o.Round(0).String(), "the origin lost its monotonic reading")

	// Two "processes": one started 37 min 12.345 s after the other.
	later := now.Add(37*time.Minute + 12345*time.Millisecond)
	o2 := lastWholeHour(later)
	for _, d := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second} {
		at := later.Add(time.Minute)
		require.Equal(t, at.Sub(o)%d, at.Sub(o2)%d, "period %v: the two processes' ticks fall at different phases", d)
	}
	// A ticker's first tick lands on a multiple of its period in wall time.
	d := 2500 * time.Millisecond
	first := later.Add(d - later.Sub(o2)%d)
	require.Zero(t, first.UnixNano()%int64(d))
}
