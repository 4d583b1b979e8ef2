package transport

import (
	"bytes"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

func msgSnap(from, to, index uint64) *raftpb.Message {
	return &raftpb.Message{
		Type: raftpb.MessageType_MsgSnap.Enum(),
		From: new(from),
		To:   new(to),
		Term: new(uint64(3)),
		Snapshot: &raftpb.Snapshot{
			Data: []byte("descriptor"),
			Metadata: &raftpb.SnapshotMetadata{
				Index:     new(index),
				Term:      new(uint64(3)),
				ConfState: &raftpb.ConfState{Voters: []uint64{1, 2}},
			},
		},
	}
}

// writeSnapshotFile writes size pseudo-random bytes as the snapshot file for
// index in dir and returns them.
func writeSnapshotFile(t *testing.T, dir string, index uint64, size int) []byte {
	t.Helper()
	data := make([]byte, size)
	r := rand.NewChaCha8([32]byte{byte(index)})
	_, _ = r.Read(data)
	require.NoError(t, os.WriteFile(SnapshotPath(dir, index), data, 0o600))
	return data
}

func TestSnapshotStreamsFileThenDelivers(t *testing.T) {
	a, b := newNode(t, "c1", 1), newNode(t, "c1", 2)
	connect(a, b)
	const index = 42
	want := writeSnapshotFile(t, a.dir, index, 5<<20+123)

	var chunks atomic.Int32
	a.t.snapshotChunkHook = func([]byte) { chunks.Add(1) }
	fileAtDelivery := make(chan []byte, 1)
	b.rec.OnReceive = func(msgs []*raftpb.Message) {
		if msgs[0].GetType() == raftpb.MessageType_MsgSnap {
			data, _ := os.ReadFile(SnapshotPath(b.dir, index))
			fileAtDelivery <- data
		}
	}

	a.t.Send([]*raftpb.Message{msgSnap(1, 2, index), msgApp(1, 2, 43)})
	require.Eventually(t, func() bool { return len(a.rec.snapshotReports()) == 1 }, waitFor, tick)
	require.Equal(t, []snapReport{{2, false}}, a.rec.snapshotReports())
	require.Zero(t, a.rec.UnreachableCount(2))
	require.GreaterOrEqual(t, chunks.Load(), int32(10), "a 5 MiB file must travel in 512 KiB chunks")

	require.True(t, bytes.Equal(want, <-fileAtDelivery), "file must be complete before MsgSnap is delivered")
	got, err := os.ReadFile(SnapshotPath(b.dir, index))
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))

	// Both the snapshot and the ordinary message arrive; MsgSnap is intact.
	require.Eventually(t, func() bool { got, _ := b.rec.received(); return len(got) == 2 }, waitFor, tick)
	msgs, _ := b.rec.received()
	var snap *raftpb.Message
	for _, m := range msgs {
		if m.GetType() == raftpb.MessageType_MsgSnap {
			snap = m
		}
	}
	require.NotNil(t, snap)
	require.Equal(t, uint64(index), snap.GetSnapshot().GetMetadata().GetIndex())
	require.Equal(t, "descriptor", string(snap.GetSnapshot().GetData()))
	requireOnlySnapFiles(t, b.dir, 1)
}

func TestSnapshotCorruptedIsRejected(t *testing.T) {
	a, b := newNode(t, "c1", 1), newNode(t, "c1", 2)
	connect(a, b)
	const index = 7
	writeSnapshotFile(t, a.dir, index, 2<<20)

	var n atomic.Int32
	a.t.snapshotChunkHook = func(data []byte) {
		if n.Add(1) == 2 {
			data[100] ^= 0xff
		}
	}
	a.t.Send([]*raftpb.Message{msgSnap(1, 2, index)})
	require.Eventually(t, func() bool { return len(a.rec.snapshotReports()) == 1 }, waitFor, tick)
	require.Equal(t, []snapReport{{2, true}}, a.rec.snapshotReports())

	got, _ := b.rec.received()
	require.Empty(t, got)
	requireOnlySnapFiles(t, b.dir, 0)
	require.Contains(t, b.log.String(), "refused snapshot")
	require.Contains(t, b.log.String(), errSnapshotChecksum.Error())
}

func TestSnapshotMissingFileOrPeerFails(t *testing.T) {
	a, b := newNode(t, "c1", 1), newNode(t, "c1", 2)
	connect(a, b)
	a.t.Send([]*raftpb.Message{msgSnap(1, 2, 99)}) // no such file
	a.t.Send([]*raftpb.Message{msgSnap(1, 5, 99)}) // no such peer
	require.Eventually(t, func() bool { return len(a.rec.snapshotReports()) == 2 }, waitFor, tick)
	require.ElementsMatch(t, []snapReport{{2, true}, {5, true}}, a.rec.snapshotReports())
	require.Equal(t, 1, a.rec.UnreachableCount(5))
	got, _ := b.rec.received()
	require.Empty(t, got)
}

// requireOnlySnapFiles asserts dir holds n entries and no temporary files.
func requireOnlySnapFiles(t *testing.T, dir string, n int) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.Len(t, names, n, "files in %s: %v", dir, names)
}
