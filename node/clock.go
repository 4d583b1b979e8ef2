package node

import "time"

// Clock is the node's source of time. Only the node loop, keepalive sender and
// the leader's expiry timers read it; lockfsm never does. Tests inject a clock
// that can jump or run at a skewed rate to check that safety never rests on
// wall-clock agreement between nodes.
//
// Implementations must be safe for concurrent use. Now must be monotonic
// (time.Now's monotonic reading is); NewTicker returns a channel that receives
// at roughly the given interval and a stop function.
type Clock interface {
	Now() time.Time
	NewTicker(d time.Duration) (<-chan time.Time, func())
}

// SystemClock is the real monotonic clock.
type SystemClock struct{}

// Now returns time.Now(), which carries a monotonic reading.
func (SystemClock) Now() time.Time { return time.Now() }

// NewTicker wraps time.NewTicker.
func (SystemClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}
