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
