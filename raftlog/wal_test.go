package raftlog

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// lastSegment returns the path of the newest segment in dir.
func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	segs, err := listSegments(dir)
	require.NoError(t, err)
	require.NotEmpty(t, segs)
	return segs[len(segs)-1].path
}

// TestWALTornTail cuts the last segment at every byte offset inside its last record
// (one Save of 3 entries and a HardState, i.e. one write): reopening must give exactly
// the log before that Save, and the WAL must keep working afterwards.
func TestWALTornTail(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	w, err := OpenWAL(dir, Options{})
	require.NoError(t, err)
	require.NoError(t, w.Save(nil, &raftpb.HardState{Term: new(uint64(1)), Commit: new(uint64(2))}, mkEnts(1, 5, 1)))
	seg := lastSegment(t, dir)
	st, err := os.Stat(seg)
	require.NoError(t, err)
	before := st.Size()
	require.NoError(t, w.Save(nil, &raftpb.HardState{Term: new(uint64(2)), Commit: new(uint64(5))}, mkEnts(4, 6, 2)))
	require.NoError(t, w.Close())
	full, err := os.ReadFile(seg)
	require.NoError(t, err)

	// The reference: the state right after the first Save.
	ref := raft.NewMemoryStorage()
	require.NoError(t, ref.Append(mkEnts(1, 5, 1)))
	require.NoError(t, ref.SetHardState(&raftpb.HardState{Term: new(uint64(1)), Commit: new(uint64(2))}))

	for cut := before; cut < int64(len(full)); cut++ {
		require.NoError(t, os.WriteFile(seg, full[:cut], 0o600))
		w, err := OpenWAL(dir, Options{NoSync: true})
		require.NoError(t, err, "cut at %d", cut)
		compareStorages(t, "torn", ref, w)
		st, err := os.Stat(seg)
		require.NoError(t, err)
		require.Equal(t, before, st.Size(), "torn tail cut away at %d", cut)
		require.NoError(t, w.Close())
	}
	// The whole file gives the whole log; and a cut WAL accepts new writes.
	require.NoError(t, os.WriteFile(seg, full[:before+3], 0o600))
	w, err = OpenWAL(dir, Options{})
	require.NoError(t, err)
	require.NoError(t, w.Save(nil, nil, mkEnts(6, 7, 3)))
	require.NoError(t, ref.Append(mkEnts(6, 7, 3)))
	require.NoError(t, w.Close())
	w, err = OpenWAL(dir, Options{})
	require.NoError(t, err)
	compareStorages(t, "after cut and append", ref, w)
	require.NoError(t, w.Close())
}

// TestWALTornSegmentCreation: a segment whose creation was cut (empty or a partial state
// record) is removed; the previous segment is the tail again.
func TestWALTornSegmentCreation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	w, err := OpenWAL(dir, Options{SegmentSize: 1})
	require.NoError(t, err)
	for i := uint64(1); i <= 3; i++ {
		require.NoError(t, w.Save(nil, nil, mkEnts(i, i, 1)))
	}
	require.NoError(t, w.Close())
	seg := lastSegment(t, dir)
	require.NoError(t, os.WriteFile(seg, []byte{1, 2, 3}, 0o600))
	w, err = OpenWAL(dir, Options{SegmentSize: 1})
	require.NoError(t, err)
	last, _ := w.LastIndex()
	require.Equal(t, uint64(2), last)
	require.NoError(t, w.Save(nil, nil, mkEnts(3, 4, 1)))
	require.NoError(t, w.Close())
	w, err = OpenWAL(dir, Options{})
	require.NoError(t, err)
	last, _ = w.LastIndex()
	require.Equal(t, uint64(4), last)
	require.NoError(t, w.Close())
}

// TestWALCorruptMiddle flips one byte in each record before the tail: Open must fail
// with errCorrupt naming the file, never panic, never truncate.
func TestWALCorruptMiddle(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	w, err := OpenWAL(dir, Options{NoSync: true})
	require.NoError(t, err)
	for i := uint64(1); i <= 10; i++ {
		require.NoError(t, w.Save(nil, &raftpb.HardState{Term: new(uint64(1)), Commit: new(i)}, mkEnts(i, i, 1)))
	}
	require.NoError(t, w.Close())
	seg := lastSegment(t, dir)
	full, err := os.ReadFile(seg)
	require.NoError(t, err)
	// The last Save wrote 2 records; flip bytes anywhere before it.
	lastSave := len(full) - 2*recordsSize(t, full)
	for _, off := range []int{0, 3, 4, 8, 9, 20, lastSave / 2, lastSave - 1} {
		bad := append([]byte(nil), full...)
		bad[off] ^= 0x40
		require.NoError(t, os.WriteFile(seg, bad, 0o600))
		_, err := OpenWAL(dir, Options{NoSync: true})
		require.ErrorIs(t, err, errCorrupt, "flip at %d", off)
		require.Contains(t, err.Error(), seg)
		after, _ := os.ReadFile(seg)
		require.Equal(t, bad, after, "file untouched")
	}
	// A corrupt segment that is not the last one is corrupt even at its tail.
	w, err = OpenWAL(dir+"2", Options{NoSync: true, SegmentSize: 1})
	require.NoError(t, err)
	for i := uint64(1); i <= 3; i++ {
		require.NoError(t, w.Save(nil, nil, mkEnts(i, i, 1)))
	}
	require.NoError(t, w.Close())
	segs, _ := listSegments(dir + "2")
	b, _ := os.ReadFile(segs[1].path)
	require.NoError(t, os.WriteFile(segs[1].path, b[:len(b)-1], 0o600))
	_, err = OpenWAL(dir+"2", Options{})
	require.ErrorIs(t, err, errCorrupt)
	// A missing middle segment too.
	require.NoError(t, os.WriteFile(segs[1].path, b, 0o600))
	require.Len(t, segs, 4)
	require.NoError(t, os.Remove(segs[2].path))
	_, err = OpenWAL(dir+"2", Options{})
	require.ErrorIs(t, err, errCorrupt)
	require.Contains(t, err.Error(), segs[3].path)
}

// recordsSize returns the size of the last record in a segment.
func recordsSize(t *testing.T, data []byte) int {
	off, last := 0, 0
	for off < len(data) {
		_, _, n, err := readRecord(data[off:])
		require.NoError(t, err)
		off, last = off+n, n
	}
	return last
}

func TestWALLocked(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	w, err := OpenWAL(dir, Options{})
	require.NoError(t, err)
	_, err = OpenWAL(dir, Options{LockTimeout: 50 * time.Millisecond})
	require.ErrorIs(t, err, errLocked)
	require.Contains(t, err.Error(), dir)
	require.NoError(t, w.Close())
	w, err = OpenWAL(dir, Options{LockTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, w.Close())
	_, err = OpenWAL(filepath.Join(t.TempDir(), "no", "such"), Options{})
	require.Error(t, err)
	require.False(t, errors.Is(err, errCorrupt))
}

// TestWALCompactDropsSegments: compaction deletes whole segments below the compaction
// point, and the log (with the term of the compaction point, the snapshot and the
// HardState) survives a restart.
func TestWALCompactDropsSegments(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	opts := Options{NoSync: true, SegmentSize: 512}
	w, err := OpenWAL(dir, opts)
	require.NoError(t, err)
	for i := uint64(1); i <= 200; i += 10 {
		require.NoError(t, w.Save(nil, &raftpb.HardState{Term: new(uint64(3)), Commit: new(i)}, mkEnts(i, i+9, 3)))
	}
	segs, _ := listSegments(dir)
	n := len(segs)
	require.Greater(t, n, 5)
	_, err = w.CreateSnapshot(150, &raftpb.ConfState{Voters: []uint64{1, 2, 3}}, []byte("data"))
	require.NoError(t, err)
	require.NoError(t, w.Compact(150))
	segs, _ = listSegments(dir)
	require.Less(t, len(segs), n/2, "old segments dropped")
	require.NoError(t, w.Close())
	w, err = OpenWAL(dir, opts)
	require.NoError(t, err)
	defer w.Close()
	first, _ := w.FirstIndex()
	last, _ := w.LastIndex()
	require.Equal(t, []uint64{151, 200}, []uint64{first, last})
	term, err := w.Term(150)
	require.NoError(t, err)
	require.Equal(t, uint64(3), term)
	_, err = w.Term(149)
	require.ErrorIs(t, err, raft.ErrCompacted)
	snap, _ := w.Snapshot()
	require.Equal(t, "data", string(snap.GetData()))
	hs, cs, _ := w.InitialState()
	require.Equal(t, uint64(191), hs.GetCommit())
	require.Equal(t, []uint64{1, 2, 3}, cs.GetVoters())
}

// TestWALPreallocate: with Preallocate the tail segment is zero-filled ahead of the
// records; reopening treats the zeros as free space (not a torn write) and writes on
// after the last record, a torn write inside the preallocated space is still cut off,
// and every segment but the last is cut back to its records.
func TestWALPreallocate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	opts := Options{Preallocate: 4096, SegmentSize: 1 << 20}
	w, err := OpenWAL(dir, opts)
	require.NoError(t, err)
	ref := raft.NewMemoryStorage()
	for i := uint64(1); i <= 5; i++ {
		require.NoError(t, w.Save(nil, &raftpb.HardState{Term: new(uint64(1)), Commit: new(i)}, mkEnts(i, i, 1)))
		require.NoError(t, ref.Append(mkEnts(i, i, 1)))
	}
	require.NoError(t, ref.SetHardState(&raftpb.HardState{Term: new(uint64(1)), Commit: new(uint64(5))}))
	require.NoError(t, w.Close())
	// reopen opens the WAL again, checks it holds what ref holds and, for i > 0, appends entry i to both.
	reopen := func(what string, i uint64) {
		t.Helper()
		w, err := OpenWAL(dir, opts)
		require.NoError(t, err)
		compareStorages(t, what, ref, w)
		if i > 0 {
			require.NoError(t, w.Save(nil, nil, mkEnts(i, i, 1)))
			require.NoError(t, ref.Append(mkEnts(i, i, 1)))
		}
		require.NoError(t, w.Close())
	}
	seg := lastSegment(t, dir)
	full, err := os.ReadFile(seg)
	require.NoError(t, err)
	require.Equal(t, 4096, len(full), "one preallocated chunk")
	used := len(bytes.TrimRight(full, "\x00"))
	require.Less(t, used, len(full))

	// Reopen: the zeros are free space; the log is intact and grows in place.
	reopen("reopened", 6)
	st, err := os.Stat(seg)
	require.NoError(t, err)
	require.Equal(t, int64(4096), st.Size(), "written inside the chunk")
	reopen("appended in place", 0)

	// A torn write inside the preallocated space: garbage after the last record.
	full, err = os.ReadFile(seg)
	require.NoError(t, err)
	used = len(bytes.TrimRight(full, "\x00"))
	torn := append([]byte(nil), full...)
	copy(torn[used:], []byte{7, 0, 0, 0, 1, 2, 3, 4, 2, 9})
	require.NoError(t, os.WriteFile(seg, torn, 0o600))
	reopen("torn in preallocated space", 7)

	// Segments roll over: only the last keeps preallocated zeros.
	opts.SegmentSize = 1
	w, err = OpenWAL(dir, opts)
	require.NoError(t, err)
	for i := uint64(8); i <= 10; i++ {
		require.NoError(t, w.Save(nil, nil, mkEnts(i, i, 1)))
		require.NoError(t, ref.Append(mkEnts(i, i, 1)))
	}
	require.NoError(t, w.Close())
	segs, err := listSegments(dir)
	require.NoError(t, err)
	require.Greater(t, len(segs), 2)
	for _, sg := range segs[:len(segs)-1] {
		b, err := os.ReadFile(sg.path)
		require.NoError(t, err)
		for off := 0; off < len(b); {
			_, _, n, err := readRecord(b[off:])
			require.NoError(t, err, "%s ends in its records (offset %d of %d)", sg.path, off, len(b))
			off += n
		}
	}
	reopen("after rollover", 0)
}

// TestWALReadsDuringWrites: raft reads (Term, Entries, LastIndex …) run while the
// writer saves, compacts and snapshots (the node's appender and loop); under -race this
// checks the two-lock scheme, and every read must see a consistent log.
func TestWALReadsDuringWrites(t *testing.T) {
	w, err := OpenWAL(filepath.Join(t.TempDir(), "wal"), Options{NoSync: true, Preallocate: 4096, SegmentSize: 8192})
	require.NoError(t, err)
	defer w.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := uint64(1); i <= 400; i++ {
			if err := w.Save(nil, &raftpb.HardState{Term: new(uint64(1)), Commit: new(i)}, mkEnts(i, i, 1)); err != nil {
				t.Error(err)
				return
			}
			if i%50 == 0 {
				if _, err := w.CreateSnapshot(i-10, nil, []byte("s")); err != nil {
					t.Error(err)
					return
				}
				if err := w.Compact(i - 20); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	for {
		select {
		case <-done:
			return
		default:
		}
		first, err := w.FirstIndex()
		require.NoError(t, err)
		last, err := w.LastIndex()
		require.NoError(t, err)
		if last >= first {
			if _, err := w.Term(last); err != nil {
				require.ErrorIs(t, err, raft.ErrCompacted)
			}
			if ents, err := w.Entries(first, last+1, math.MaxUint64); err == nil {
				require.NotEmpty(t, ents)
			} else {
				require.ErrorIs(t, err, raft.ErrCompacted)
			}
		}
		_ = w.HasState()
	}
}
