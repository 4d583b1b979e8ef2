package node

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/raftlog"
)

// persistConfState records cs as the configuration applied at index, as the
// node does after each configuration change.
func persistConfState(t *testing.T, l raftlog.Log, cs *raftpb.ConfState, index uint64) {
	t.Helper()
	require.NoError(t, l.SetConfState(cs, index))
}

// TestS1RestartKeepsLatestConfiguration (S1; review finding 9, confirmed):
// a voter applied AddLearner 4, AddLearner 5, Promote 4, Promote 5
// (entries 2–5) and crashed while the commit index on its disk still said 1
// (a commit-only HardState is not synced). It restarts with the latest
// configuration it applied, {1..5}, and then re-learns that 2 and 3 are
// committed. Raft re-delivers them; re-applying them on top of {1..5} moved
// the configuration back to voters {1,2,3} — a quorum of 2 while the
// cluster's is 3 of 5, enough for two leaders in one term. The
// configuration must never go back to one older than what the node had
// applied; with both raft log engines.
func TestS1RestartKeepsLatestConfiguration(t *testing.T) {
	for _, engine := range []string{logEngineWAL, logEngineBbolt} {
		t.Run(engine, func(t *testing.T) {
			dir := t.TempDir()
			l, _, err := openLog(dir, engine, slog.New(slog.DiscardHandler))
			require.NoError(t, err)
			require.NoError(t, l.Bootstrap(&raftpb.ConfState{Voters: []uint64{1, 2, 3}}))
			var ents []*raftpb.Entry
			for i, ch := range []struct {
				typ raftpb.ConfChangeType
				id  uint64
			}{{raftpb.ConfChangeAddLearnerNode, 4}, {raftpb.ConfChangeAddLearnerNode, 5}, {raftpb.ConfChangeAddNode, 4}, {raftpb.ConfChangeAddNode, 5}} {
				data, err := proto.Marshal(&raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: ch.typ.Enum(), NodeId: new(ch.id)}}})
				require.NoError(t, err)
				ents = append(ents, &raftpb.Entry{Index: new(uint64(i + 2)), Term: new(uint64(2)),
					Type: raftpb.EntryType_EntryConfChangeV2.Enum(), Data: data})
			}
			require.NoError(t, l.Save(nil, &raftpb.HardState{Term: new(uint64(2)), Commit: new(uint64(1))}, ents))
			// What the node persisted while it applied 2..5 before the crash.
			persistConfState(t, l, &raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}, 2)
			persistConfState(t, l, &raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4, 5}}, 3)
			persistConfState(t, l, &raftpb.ConfState{Voters: []uint64{1, 2, 3, 4}, Learners: []uint64{5}}, 4)
			persistConfState(t, l, &raftpb.ConfState{Voters: []uint64{1, 2, 3, 4, 5}}, 5)
			require.NoError(t, l.Close())

			cfg := Config{ID: 1, DataDir: dir, Members: []Member{{ID: 1, Addr: "127.0.0.1:1"}}, Logger: testLogger(t, 1)}
			fastConfig(&cfg)
			// It must not campaign: only the re-learned commits move it.
			cfg.ElectionTicks, cfg.SessionTTL, cfg.KeepaliveInterval = 1000, 3*time.Minute, time.Second
			n, err := Start(cfg)
			require.NoError(t, err)
			t.Cleanup(n.Crash)
			voters := func() (loop, rft []uint64) {
				done := make(chan struct{})
				require.NoError(t, n.do(context.Background(), func() {
					loop = slices.Clone(n.loop.confState.GetVoters())
					for id := range n.rn.Status().Config.Voters.IDs() {
						rft = append(rft, id)
					}
					close(done)
				}))
				<-done
				slices.Sort(loop)
				slices.Sort(rft)
				return loop, rft
			}
			all := []uint64{1, 2, 3, 4, 5}
			lv, rv := voters()
			require.Equal(t, all, lv, "restarted with the latest configuration")
			require.Equal(t, all, rv)

			// Voter 2, leading term 2, tells it that 2 and 3 are committed.
			n.recvc <- []*raftpb.Message{{Type: raftpb.MessageType_MsgHeartbeat.Enum(), From: new(uint64(2)), To: new(uint64(1)),
				Term: new(uint64(2)), Commit: new(uint64(3))}}
			require.Eventually(t, func() bool {
				applied := make(chan uint64, 1)
				if n.do(context.Background(), func() { applied <- n.rn.Status().Applied }) != nil {
					return false
				}
				return <-applied >= 3
			}, 10*time.Second, 5*time.Millisecond, "entries 2 and 3 never applied")
			lv, rv = voters()
			require.Equal(t, all, lv, "the configuration went back after re-applying entries 2 and 3")
			require.Equal(t, all, rv, "raft's configuration went back after re-applying entries 2 and 3")
		})
	}
}

// TestS3FailedConfStateWriteStopsNode (S3; review finding 8): a voter whose
// write of the new configuration fails, after it applied a configuration
// change, stops serving with lockerr.ErrStorage, as after any failed write; it
// logged the error and went on, and with the bbolt engine (which does not
// refuse later writes after a failure) could restart later with an older
// configuration than the one it had applied.
func TestS3FailedConfStateWriteStopsNode(t *testing.T) {
	f := newGossipCluster(t, "confwrite", 4, 3)
	_, _, x := formThree(t, f)
	faultsOf(f, x).FailConfStates(errors.New("disk full"))
	startSlot(t, f, 4, f.Member(1).GossipAddr()) // the leader adds it as a learner: a configuration change
	waitConf(t, f, 30*time.Second, "learner added", func(v, l []uint64) bool { return len(l) == 1 })
	require.Eventually(t, func() bool { return errors.Is(x.err(), lockerr.ErrStorage) }, 10*time.Second, 5*time.Millisecond,
		"the voter whose configuration write failed kept serving (err %v)", x.err())
	require.ErrorContains(t, x.err(), "disk full")
	ctx := ctxT(t, 10*time.Second)
	_, err := x.Acquire(ctx, "x", "o", true, 0)
	require.ErrorIs(t, err, lockerr.ErrStorage)
}
