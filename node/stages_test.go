package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/knobs"
)

// Every command made through a node of a probed cluster gets every stage
// stamped, in causal order, and Report names every step for both kinds of
// caller.
func TestStageProbeStampsEveryStage(t *testing.T) {
	probe := NewStageProbe(1 << 12)
	tc := newCluster(t, 3, func(c *Config) { knobsOfConfig(c).Stages = probe })
	lead := leader(t, tc)
	ctx := ctxT(t, 10*time.Second)
	for _, id := range []uint64{lead, follower(t, tc)} {
		for i := range 5 {
			h, err := tc.Member(id).Acquire(ctx, fmt.Sprintf("st/%d/%d", id, i), "o", true, 0)
			require.NoError(t, err)
			require.NoError(t, h.Release(ctx))
		}
	}
	// A follower's caller returns once its own node applied; the leader sends
	// the commit before its loop applies, so its last stamps may still be on
	// their way. Wait for the leader to have applied every command made.
	require.Eventually(t, func() bool {
		for i := uint64(1); i < probe.cap; i++ {
			if probe.owner[i].Load() != 0 && probe.get(lead, i, stageApplied) == 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "the leader did not apply every command")
	seen := map[uint64]int{}
	for i := uint64(1); i < probe.cap; i++ {
		o := probe.owner[i].Load()
		if o == 0 {
			continue
		}
		seen[o]++
		at := func(node uint64, s knobs.Stage) time.Duration { return probe.get(node, i, s) }
		// Causal order: caller → its loop → the leader's log → the leader's
		// disk → the leader's apply; the caller's node applies after the
		// leader appended and before the caller returns.
		chain := []time.Duration{at(o, stageCalled), at(o, stageProposed), at(lead, stageAppended),
			at(lead, stageDurable), at(lead, stageApplied)}
		for k, v := range chain {
			require.Positive(t, v, "entry %d stage %d unstamped", i, k)
			if k > 0 {
				require.GreaterOrEqual(t, v, chain[k-1], "entry %d: step %d went back in time", i, k)
			}
		}
		require.GreaterOrEqual(t, at(o, stageApplied), at(lead, stageAppended))
		require.GreaterOrEqual(t, at(o, stageReturned), at(o, stageApplied))
		acked := 0
		for f := uint64(1); f <= 3; f++ {
			if f != lead && at(f, stageAcked) > 0 {
				acked++
				require.GreaterOrEqual(t, at(f, stageReceived), at(lead, stageAppended))
				require.GreaterOrEqual(t, at(lead, stageSent), at(lead, stageAppended))
				require.GreaterOrEqual(t, at(f, stageReceived), at(lead, stageSent))
				require.GreaterOrEqual(t, at(f, stageAcked), at(f, stageDurable))
			}
		}
		require.Positive(t, acked, "entry %d: no follower acknowledgement stamped", i)
	}
	require.Len(t, seen, 2, "commands from the leader and from a follower")
	var out strings.Builder
	probe.Report(&out, lead)
	t.Log("\n" + out.String())
	for _, want := range []string{"leader's caller", "follower's caller", "leader applied → caller's node applied", "sent → follower received", "total: call → returned"} {
		require.Contains(t, out.String(), want)
	}

	// One caller per node, one command at a time: the log order is both the
	// call order and the proposal order.
	out.Reset()
	probe.OrderReport(&out)
	t.Log("\n" + out.String())
	require.Equal(t, 2, strings.Count(out.String(), "call order 0 times, from proposal order 0 times"), out.String())
}
