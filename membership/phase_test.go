package membership

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestUntilPhase: memberlist is started on the instants the node's tickers
// keep — multiples of the probe interval from the last whole hour of wall
// time — so two members started at different moments probe at the same
// instants, and the wait is never longer than one interval nor than
// maxPhaseWait.
func TestUntilPhase(t *testing.T) {
	hour := time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		at   time.Duration // after the hour
		d    time.Duration
		want time.Duration
	}{
		{0, time.Second, 0},
		{1, time.Second, time.Second - 1},
		{1500 * time.Millisecond, time.Second, 500 * time.Millisecond},
		{59*time.Minute + 59*time.Second + 900*time.Millisecond, time.Second, 100 * time.Millisecond},
		{130 * time.Millisecond, 200 * time.Millisecond, 70 * time.Millisecond},
		{7 * time.Second, 2 * time.Second, time.Second},
		{time.Minute + 1, 0, 0},
		{time.Minute + 1, 5 * time.Second, 0}, // WANTiming: starts at once
		{time.Minute + 1, time.Hour, 0},
	} {
		now := hour.Add(c.at)
		got := untilPhase(now, c.d)
		require.Equal(t, c.want, got, "%+v", c)
		if c.d > 0 && c.d <= maxPhaseWait {
			require.Zero(t, now.Add(got).UnixNano()%int64(c.d), "%+v: not on a multiple of the interval", c)
			require.Less(t, got, c.d)
		}
	}
}
