package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/lockerr"
)

// S7: a replica that meets a log entry written by a newer lockraft version
// must not skip it (it would then differ from the replicas that applied it):
// every replica stops applying there and stops serving with lockerr.ErrNewerVersion,
// and nothing after that entry is applied.
func TestS7NewerEntryStopsEveryReplica(t *testing.T) {
	tc := newCluster(t, 3)
	lead := tc.Member(leader(t, tc))
	_, err := lead.Acquire(ctxT(t, 10*time.Second), "before", "o", false, 0)
	require.NoError(t, err)
	// A well-formed command envelope of format version 9: the version byte,
	// a kind, an empty field mask.
	newer := []byte{9, 5, 0}
	require.NoError(t, lead.do(context.Background(), func() { lead.loop.props.add(newer, nil) }))
	for id, n := range tc.All() {
		require.Eventually(t, func() bool { return n.err() != nil }, 10*time.Second, 10*time.Millisecond,
			"node %d kept serving past a newer-format entry", id)
		require.ErrorIs(t, n.err(), lockerr.ErrNewerVersion, "node %d", id)
		_, err := n.Acquire(ctxT(t, time.Second), "after", "o", false, 0)
		require.ErrorIs(t, err, lockerr.ErrNewerVersion, "node %d", id)
	}
}
