package node

import (
	mrand "math/rand/v2"
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
	a, stopA := alignedTicker(time.Now(), d, 0)
	time.Sleep(d / 3) // a different phase at creation
	b, stopB := alignedTicker(time.Now(), d, 0)
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
			w := untilAligned(start, d, 0)
			require.True(t, w > 0 && w <= d, "period %v: first tick after %v", d, w)
			first := start.Add(w)
			require.Zero(t, first.UnixNano()%int64(d), "period %v: the first tick is off the phase", d)
		}
	}
	// On a whole multiple the next tick is a full period away, not now.
	at := time.Unix(0, 0).Add(1000 * time.Second)
	require.Equal(t, time.Second, untilAligned(at, time.Second, 0))
}

// TestPhasedTickFallsOnItsPhase: a ticker given a phase ticks that long
// after the multiples of its period in wall time, first within one period.
func TestPhasedTickFallsOnItsPhase(t *testing.T) {
	const d = 2500 * time.Millisecond
	now := time.Unix(1_800_000_000, 123_456_789)
	for _, phase := range []time.Duration{200 * time.Millisecond, 1400 * time.Millisecond, 2400 * time.Millisecond} {
		w := untilAligned(now, d, phase)
		require.True(t, w > 0 && w <= d, "phase %v: first tick after %v", phase, w)
		require.Equal(t, int64(phase), now.Add(w).UnixNano()%int64(d), "phase %v: the first tick is off its phase", phase)
	}
	// Exactly on the phase (1000.4 s is 0.4 s past 1000 s, a multiple of
	// 2.5 s): a full period away, not now.
	at := time.Unix(1000, int64(400*time.Millisecond))
	require.Equal(t, d, untilAligned(at, d, 400*time.Millisecond))
}

// TestKeepalivesSpreadOverHeartbeatSlots: members' keepalives fall on
// slots a heartbeat interval apart within the keepalive interval, chosen by
// id, so a leader answers a fleet's keepalives in small bursts on its
// heartbeat wake-ups and not all at one instant; with too short an interval
// for two slots, on the common phase.
func TestKeepalivesSpreadOverHeartbeatSlots(t *testing.T) {
	c := Config{TickInterval: 100 * time.Millisecond, HeartbeatTicks: 2, KeepaliveInterval: 2500 * time.Millisecond}
	const slots = 12 // 2.5 s / 200 ms
	for name, ids := range map[string]func(i int) uint64{
		"static ids": func(i int) uint64 { return uint64(i + 1) },
		"random ids": func(i int) uint64 { return mrand.New(mrand.NewPCG(7, uint64(i))).Uint64() },
	} {
		count := map[time.Duration]int{}
		for i := range 300 {
			c.ID = ids(i)
			p := c.keepalivePhase()
			require.Zero(t, p%c.heartbeatInterval(), "%s: phase %v is not on a heartbeat", name, p)
			require.Less(t, p, c.KeepaliveInterval, name)
			count[p]++
		}
		require.Len(t, count, slots, "%s: every slot is used", name)
		for p, n := range count {
			require.LessOrEqual(t, n, 2*300/slots, "%s: slot %v has %d of 300 keepalives", name, p, n)
		}
	}
	c.KeepaliveInterval = 300 * time.Millisecond
	require.Zero(t, c.keepalivePhase(), "one slot: the common phase")
}
