package raftlog

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// TestConfIndexKeptWithConfState (S1): both engines keep the index a stored
// ConfState reflects across restarts, WAL segment rotation (the index rides
// in each segment's state record) and compaction, so a restarted node knows
// which configuration changes it must not apply again; a snapshot installed
// through Save replaces both.
func TestConfIndexKeptWithConfState(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			opts := Options{NoSync: true, SegmentSize: 256} // a new WAL segment every few entries
			s, path := eng.openTemp(t, opts)
			require.NoError(t, s.Bootstrap(&raftpb.ConfState{Voters: []uint64{1, 2, 3}}))
			require.Equal(t, uint64(1), s.ConfIndex(), "the bootstrap snapshot's")
			require.NoError(t, s.Save(nil, &raftpb.HardState{Term: new(uint64(2)), Commit: new(uint64(40))}, mkEnts(2, 40, 2)))
			cs := &raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}
			require.NoError(t, s.SetConfState(cs, 7))
			require.NoError(t, s.Save(nil, nil, mkEnts(41, 60, 2))) // more segments after the record
			_, err := s.CreateSnapshot(30, cs, nil)
			require.NoError(t, err)
			require.NoError(t, s.Compact(25)) // drops the segment holding the ConfState record
			require.Equal(t, uint64(30), s.ConfIndex(), "an own snapshot newer than the change")
			s = eng.reopen(t, s, path, opts)
			require.Equal(t, uint64(30), s.ConfIndex())
			_, got, err := s.InitialState()
			require.NoError(t, err)
			require.True(t, proto.Equal(cs, got), "%v", got)

			cs2 := &raftpb.ConfState{Voters: []uint64{1, 2, 3, 4}}
			require.NoError(t, s.SetConfState(cs2, 45))
			require.NoError(t, s.Save(nil, nil, mkEnts(61, 90, 2)))
			s = eng.reopen(t, s, path, opts)
			require.Equal(t, uint64(45), s.ConfIndex())
			_, got, _ = s.InitialState()
			require.True(t, proto.Equal(cs2, got), "%v", got)

			in := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(100)), Term: new(uint64(3)),
				ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3, 4, 5}}}}
			require.NoError(t, s.Save(in, nil, nil))
			require.Equal(t, uint64(100), s.ConfIndex())
			s = eng.reopen(t, s, path, opts)
			require.Equal(t, uint64(100), s.ConfIndex())
		})
	}
}

// TestConfStateEncodingCompatible: a ConfState stored before indexes were
// kept reads as before, with index 0 (unknown); one stored with an index
// reads as the same ConfState for a reader that does not know the field
// (proto keeps it as unknown).
func TestConfStateEncodingCompatible(t *testing.T) {
	cs := &raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{9}, AutoLeave: new(true)}
	old, err := proto.Marshal(cs)
	require.NoError(t, err)
	got, index, err := unmarshalConfState(old)
	require.NoError(t, err)
	require.Zero(t, index)
	require.True(t, proto.Equal(cs, got))

	b, err := marshalConfState(cs, 1<<40)
	require.NoError(t, err)
	got, index, err = unmarshalConfState(b)
	require.NoError(t, err)
	require.Equal(t, uint64(1<<40), index)
	require.True(t, proto.Equal(cs, got), "no unknown field left behind")
	plain := &raftpb.ConfState{}
	require.NoError(t, proto.Unmarshal(b, plain)) // an older reader
	require.Equal(t, cs.GetVoters(), plain.GetVoters())
	require.Equal(t, cs.GetLearners(), plain.GetLearners())
	_, _, err = unmarshalConfState(append(b[:len(b):len(b)], 0xc2)) // a truncated trailing field
	require.Error(t, err)
}
