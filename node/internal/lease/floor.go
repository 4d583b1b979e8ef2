package lease

import (
	"fmt"
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
)

// Floor is the shortest lock lease (an Acquire's own lease) that a healthy
// cluster with these timings can hand out and keep renewed, rounded up to
// the whole millisecond leases are carried in. Two conditions, the larger
// wins:
//
//   - A grant whose start the holder cannot date (one from the wait queue,
//     or one that arrives late) is handed out only after one renewal
//     confirms it, and that renewal may wait half the lease. A renewal can
//     wait up to one heartbeat interval for its confirmation round to be
//     issued, plus a tick for the round trip: d/2 ≥ heartbeat + tick.
//   - The holder's Context ends 2·drift·d + one tick before the lease does
//     (S5). What is left must cover one renewal, or Renew could never keep
//     the lock: d·(1 − 2·drift) − tick ≥ heartbeat + tick.
//
// With a 100 ms tick, a 200 ms heartbeat and 2 % drift that is 600 ms.
func Floor(tick, heartbeat time.Duration, drift float64) time.Duration {
	confirm := 2 * (heartbeat + tick)
	window := time.Duration(float64(heartbeat+2*tick) / (1 - 2*drift))
	return (max(confirm, window) + time.Millisecond - 1).Truncate(time.Millisecond)
}

// CheckFloor refuses a positive lease d below Floor with an error wrapping
// lockerr.ErrInvalidLease that names the floor. 0 (no lease) passes.
func CheckFloor(d, tick, heartbeat time.Duration, drift float64) error {
	if f := Floor(tick, heartbeat, drift); d > 0 && d < f {
		return fmt.Errorf("%w: lease %v is below the floor of %v for a %v tick, a %v heartbeat and a drift ratio of %v",
			lockerr.ErrInvalidLease, d, f, tick, heartbeat, drift)
	}
	return nil
}
