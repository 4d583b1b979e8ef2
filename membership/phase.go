package membership

import "time"

// memberlist's probe and gossip tickers tick from the moment Create starts
// them. The node's own tickers (node/clock.go) tick on multiples of their
// period in wall time, in every process, so that wake-ups fall together: an idle member's CPU is mostly the Go runtime
// waking up. Starting memberlist on that phase puts its probes on the same
// instants — this member's own probe tick, its keepalive and the probes
// that other members send it.

// maxPhaseWait bounds what Start waits for the phase: one probe interval,
// so a member with a probe interval longer than this (WANTiming's 5 s, a
// test's hour) starts at once, off the phase — its wake-ups are rare anyway.
const maxPhaseWait = 2 * time.Second

// untilPhase is how long from now until the next multiple of d in wall
// time (the same instants in every process whose clock agrees, and the
// node's tickers' instants); 0 for d over maxPhaseWait.
func untilPhase(now time.Time, d time.Duration) time.Duration {
	if d <= 0 || d > maxPhaseWait {
		return 0
	}
	return (d - time.Duration(now.UnixNano()%int64(d))) % d
}
