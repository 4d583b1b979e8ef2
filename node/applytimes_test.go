package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestApplyTimes: indexes are dated between the samples around them, never
// outside [sample, sample+sampleEvery); unknown before the process's first
// own apply; the buffer stays bounded and keeps covering the oldest index.
func TestApplyTimes(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	a := applyTimes{knownFrom: 10}
	a.note(5, t0) // committed before this process: ignored
	require.True(t, a.when(5, 5, t0).IsZero())
	a.note(10, t0)                                     // sample (10, t0)
	a.note(20, t0.Add(100*time.Millisecond))           // within sampleEvery: no sample
	a.note(30, t0.Add(time.Hour))                      // an hour idle: sample (30, t0+1h)
	a.note(40, t0.Add(time.Hour+300*time.Millisecond)) // sample (40, ...)
	require.Len(t, a.idx, 3)
	now := t0.Add(2 * time.Hour)
	// 20 was applied in [t0, t0+250ms): interpolated inside that span, not
	// towards the next sample an hour later.
	got := a.when(20, 45, now)
	require.False(t, got.Before(t0))
	require.True(t, got.Before(t0.Add(sampleEvery)), "%v", got.Sub(t0))
	require.Equal(t, t0.Add(time.Hour), a.when(30, 45, now))
	require.True(t, a.when(35, 45, now).After(t0.Add(time.Hour)))
	require.True(t, a.when(46, 45, now).IsZero(), "not applied yet")
	require.True(t, a.when(9, 45, now).IsZero())

	// Bounded: after many samples the buffer halves, and an old index still
	// gets a date no later than its true one.
	b := applyTimes{}
	for i := range 3 * maxSamples {
		b.note(uint64(100+i*10), t0.Add(time.Duration(i)*time.Second))
	}
	require.LessOrEqual(t, len(b.idx), maxSamples)
	got = b.when(105, uint64(100+3*maxSamples*10), t0.Add(4*time.Hour))
	require.False(t, got.IsZero())
	require.False(t, got.After(t0.Add(sampleEvery)))
	b.restart(1 << 40)
	require.True(t, b.when(105, 1<<41, t0).IsZero(), "restored from a snapshot: undated")
}
