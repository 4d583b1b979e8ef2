package raftlog

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func TestSaveTruncatesConflictingSuffix(t *testing.T) {
	for _, cache := range []int{2, 100} { // suffix on disk only, and in memory
		s, path := openTemp(t, Options{CacheEntries: cache})
		require.NoError(t, s.Save(nil, nil, mkEnts(1, 10, 1)))
		require.NoError(t, s.Save(nil, nil, mkEnts(6, 7, 2))) // replaces 6..10
		for round := range 2 {
			st := s
			if round == 1 {
				st = reopen(t, s, path, Options{CacheEntries: cache})
			}
			last, err := st.LastIndex()
			require.NoError(t, err)
			require.Equal(t, uint64(7), last)
			ents, err := st.Entries(1, 8, 1<<20)
			require.NoError(t, err)
			require.True(t, sameEntries(append(mkEnts(1, 5, 1), mkEnts(6, 7, 2)...), ents), "%v", ents)
			_, err = st.Term(8)
			require.ErrorIs(t, err, raft.ErrUnavailable)
			s = st
		}
	}
}

func TestSaveRejectsGap(t *testing.T) {
	s, _ := openTemp(t, Options{})
	require.NoError(t, s.Save(nil, nil, mkEnts(1, 3, 1)))
	require.Error(t, s.Save(nil, nil, mkEnts(5, 6, 1)))
	require.Error(t, s.Save(nil, nil, []*raftpb.Entry{mkEnts(4, 4, 1)[0], mkEnts(6, 6, 1)[0]}))
	last, _ := s.LastIndex()
	require.Equal(t, uint64(3), last)
}

func TestEntriesMaxSize(t *testing.T) {
	s, _ := openTemp(t, Options{CacheEntries: 4}) // entries 1..6 on disk only, 7..10 cached too
	require.NoError(t, s.Save(nil, nil, mkEnts(1, 10, 1)))
	one := uint64(proto.Size(mkEnts(1, 1, 1)[0]))
	for _, tc := range []struct{ lo, hi, maxSize, want uint64 }{
		{1, 11, 0, 1},         // always at least one entry
		{1, 11, one, 1},       // exactly one fits
		{1, 11, 3*one - 1, 2}, // the third would exceed
		{1, 11, 3 * one, 3},   // limit is inclusive
		{5, 11, 3 * one, 3},   // crossing from disk into the cache
		{8, 11, 0, 1},         // cache only
		{1, 11, 1 << 30, 10},  // everything
		{3, 3, 1 << 30, 0},    // empty range
	} {
		ents, err := s.Entries(tc.lo, tc.hi, tc.maxSize)
		require.NoError(t, err)
		require.Len(t, ents, int(tc.want), "%+v", tc)
		if tc.want > 0 {
			require.Equal(t, tc.lo, ents[0].GetIndex())
		}
	}
	// The caller owns the slice: appending to it must not disturb the storage.
	ents, _ := s.Entries(8, 10, 1<<30)
	_ = append(ents, &raftpb.Entry{Index: new(uint64(99))})
	again, _ := s.Entries(8, 11, 1<<30)
	require.Equal(t, uint64(10), again[2].GetIndex())
	_, err := s.Entries(5, 12, 1<<30)
	require.ErrorIs(t, err, raft.ErrUnavailable)
}

func TestTermAfterCompaction(t *testing.T) {
	s, path := openTemp(t, Options{CacheEntries: 3})
	require.NoError(t, s.Save(nil, nil, append(mkEnts(1, 4, 1), mkEnts(5, 8, 2)...)))
	require.NoError(t, s.Compact(5))
	for round := range 2 {
		st := s
		if round == 1 {
			st = reopen(t, s, path, Options{CacheEntries: 3})
		}
		first, _ := st.FirstIndex()
		require.Equal(t, uint64(6), first)
		term, err := st.Term(first - 1)
		require.NoError(t, err)
		require.Equal(t, uint64(2), term)
		_, err = st.Term(first - 2)
		require.ErrorIs(t, err, raft.ErrCompacted)
		_, err = st.Entries(5, 7, 1<<20)
		require.ErrorIs(t, err, raft.ErrCompacted)
		require.ErrorIs(t, st.Compact(5), raft.ErrCompacted)
		require.Error(t, st.Compact(9))
		s = st
	}
}

func TestRestartRestoresState(t *testing.T) {
	s, path := openTemp(t, Options{CacheEntries: 5})
	hs := &raftpb.HardState{Term: new(uint64(3)), Vote: new(uint64(2)), Commit: new(uint64(12))}
	require.NoError(t, s.Save(nil, hs, append(mkEnts(1, 10, 2), mkEnts(11, 20, 3)...)))
	cs := &raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	_, err := s.CreateSnapshot(8, cs, []byte("descriptor"))
	require.NoError(t, err)
	require.NoError(t, s.Compact(6))
	cs2 := &raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}
	require.Equal(t, uint64(8), s.ConfIndex(), "no stored ConfState: the snapshot's")
	require.NoError(t, s.SetConfState(cs2, 15))
	require.Equal(t, uint64(15), s.ConfIndex())

	s2 := reopen(t, s, path, Options{CacheEntries: 5})
	require.Equal(t, uint64(15), s2.ConfIndex(), "the index is kept with the ConfState")
	gotHS, gotCS, err := s2.InitialState()
	require.NoError(t, err)
	require.True(t, proto.Equal(hs, gotHS), "%v", gotHS)
	require.True(t, proto.Equal(cs2, gotCS), "%v", gotCS)
	snap, err := s2.Snapshot()
	require.NoError(t, err)
	require.Equal(t, uint64(8), snap.GetMetadata().GetIndex())
	require.Equal(t, uint64(2), snap.GetMetadata().GetTerm())
	require.Equal(t, []byte("descriptor"), snap.GetData())
	require.Equal(t, cs.GetVoters(), snap.GetMetadata().GetConfState().GetVoters())
	ents, err := s2.Entries(7, 21, 1<<30)
	require.NoError(t, err)
	require.True(t, sameEntries(append(mkEnts(7, 10, 2), mkEnts(11, 20, 3)...), ents))
	require.True(t, s2.HasState())

	// Installing a snapshot supersedes the ConfState from SetConfState.
	in := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(30)), Term: new(uint64(4)), ConfState: cs}}
	require.NoError(t, s2.Save(in, nil, nil))
	s3 := reopen(t, s2, path, Options{})
	_, gotCS, _ = s3.InitialState()
	require.Equal(t, uint64(30), s3.ConfIndex())
	require.Equal(t, cs.GetVoters(), gotCS.GetVoters())
	require.Empty(t, gotCS.GetLearners())
	first, _ := s3.FirstIndex()
	last, _ := s3.LastIndex()
	require.Equal(t, [2]uint64{31, 30}, [2]uint64{first, last})
	require.ErrorIs(t, s3.Save(in, nil, nil), raft.ErrSnapOutOfDate)
}

// TestFailedWriteIsReported makes the commit fail and checks the error reaches the
// caller wrapped in errWrite and that neither memory nor the file changed.
func TestFailedWriteIsReported(t *testing.T) {
	s, path := openTemp(t, Options{})
	require.NoError(t, s.Save(nil, nil, mkEnts(1, 5, 1)))
	boom := errors.New("disk on fire")
	s.beforeCommit = func() error { return boom }
	hs := &raftpb.HardState{Term: new(uint64(2)), Commit: new(uint64(5))}
	err := s.Save(nil, hs, mkEnts(4, 8, 2))
	require.ErrorIs(t, err, errWrite)
	require.ErrorContains(t, err, "disk on fire")
	require.ErrorIs(t, s.Compact(3), errWrite)
	_, err = s.CreateSnapshot(3, nil, nil)
	require.ErrorIs(t, err, errWrite)
	require.ErrorIs(t, s.SetConfState(&raftpb.ConfState{}, 1), errWrite)

	check := func(st *Storage) {
		last, _ := st.LastIndex()
		first, _ := st.FirstIndex()
		require.Equal(t, [2]uint64{1, 5}, [2]uint64{first, last})
		term, _ := st.Term(4)
		require.Equal(t, uint64(1), term)
		gotHS, _, _ := st.InitialState()
		require.Nil(t, gotHS)
		snap, _ := st.Snapshot()
		require.Zero(t, snap.GetMetadata().GetIndex())
	}
	check(s)
	s.beforeCommit = nil
	check(reopen(t, s, path, Options{}))
}

func TestSaveSkipsEmptyWrites(t *testing.T) {
	s, _ := openTemp(t, Options{})
	commits := 0
	s.beforeCommit = func() error { commits++; return nil }
	hs := &raftpb.HardState{Term: new(uint64(1))}
	require.NoError(t, s.Save(nil, nil, nil))
	require.NoError(t, s.Save(&raftpb.Snapshot{}, nil, nil))
	require.Equal(t, 0, commits)
	require.NoError(t, s.Save(nil, hs, mkEnts(1, 64, 1)))
	require.Equal(t, 1, commits, "one transaction per Save")
	require.NoError(t, s.Save(nil, proto.Clone(hs).(*raftpb.HardState), mkEnts(1, 1, 1)[:0]))
	require.Equal(t, 1, commits, "unchanged HardState is not rewritten")
}

func TestClosedAndBootstrapErrors(t *testing.T) {
	s, _ := openTemp(t, Options{})
	require.False(t, s.HasState())
	require.Error(t, s.Bootstrap(&raftpb.ConfState{}))
	require.NoError(t, s.Bootstrap(&raftpb.ConfState{Voters: []uint64{1}}))
	require.True(t, s.HasState())
	require.ErrorIs(t, s.Bootstrap(&raftpb.ConfState{Voters: []uint64{1}}), errNotEmpty)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Save(nil, nil, mkEnts(2, 2, 1)), errClosed)
	_, err := s.Entries(2, 2, 0)
	require.ErrorIs(t, err, errClosed)
	_, err = s.Snapshot()
	require.ErrorIs(t, err, errClosed)
}

// TestConcurrentReaders runs transport-like Snapshot/Entries readers against a writer;
// meaningful under -race.
func TestConcurrentReaders(t *testing.T) {
	s, _ := openTemp(t, Options{NoSync: true, CacheEntries: 8})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Snapshot(); err != nil {
					t.Error(err)
					return
				}
				first, _ := s.FirstIndex()
				last, _ := s.LastIndex()
				if last >= first {
					if _, err := s.Entries(first, last+1, 1<<20); err != nil && !errors.Is(err, raft.ErrCompacted) && !errors.Is(err, raft.ErrUnavailable) {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	for i := uint64(1); i <= 200; i += 10 {
		require.NoError(t, s.Save(nil, nil, mkEnts(i, i+9, 1)))
		if i > 50 {
			_, err := s.CreateSnapshot(i-20, nil, []byte("d"))
			require.NoError(t, err)
			require.NoError(t, s.Compact(i-30))
		}
	}
	close(stop)
	wg.Wait()
}
