package node

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/node/internal/campaign"
)

// warnLogger is a raft.Logger that keeps what raft says at Warning.
type warnLogger struct {
	raft.Logger
	mu    sync.Mutex
	warns []string
}

func (l *warnLogger) Warningf(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.warns = append(l.warns, fmt.Sprintf(format, v...))
}

// A member that stood aside for a peer's campaign campaigns when the peer
// did not, if raft would let it (L2: a cluster elects a leader); one that
// is not a voter of its configuration (a founder not configured yet grants
// pre-votes as readily as any) does not try, which raft refuses with a
// WARN in a normal lifecycle (the shippable-logs test caught it once).
func TestCampaignAfterYieldOnlyWhenPromotable(t *testing.T) {
	for _, tc := range []struct {
		name        string
		voters      []uint64
		canCampaign bool
		want        raft.StateType
	}{
		{"voter", []uint64{1, 2, 3}, true, raft.StatePreCandidate},
		{"not a voter", []uint64{2, 3}, false, raft.StateFollower},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rn, log := rawNodeOf(t, tc.voters)
			y := campaign.Yield{For: time.Millisecond}
			now := time.Now()
			require.True(t, y.Granted(now, 1, 2, rn.BasicStatus().GetTerm(), false))
			campaignAfterYield(&y, rn, 0, tc.canCampaign, now.Add(time.Second), slog.New(slog.DiscardHandler))
			require.Equal(t, tc.want, rn.BasicStatus().RaftState)
			require.Empty(t, log.warns)
		})
	}
	// What the guard spares: raft's answer to a campaign it cannot make.
	rn, log := rawNodeOf(t, []uint64{2, 3})
	_ = rn.Campaign()
	require.Len(t, log.warns, 1)
	require.True(t, strings.Contains(log.warns[0], "unpromotable"), log.warns[0])
}

// rawNodeOf is raft node 1 with voters as its configuration, and its
// warnings.
func rawNodeOf(t *testing.T, voters []uint64) (*raft.RawNode, *warnLogger) {
	st := raft.NewMemoryStorage()
	require.NoError(t, st.ApplySnapshot(&raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(2)),
		Term: new(uint64(1)), ConfState: &raftpb.ConfState{Voters: voters}}}))
	log := &warnLogger{Logger: discardLogger()}
	rn, err := raft.NewRawNode(&raft.Config{ID: 1, ElectionTick: 10, HeartbeatTick: 1, Storage: st,
		MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256, PreVote: true, Logger: log})
	require.NoError(t, err)
	return rn, log
}
