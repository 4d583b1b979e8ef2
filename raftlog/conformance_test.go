package raftlog

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

var conformanceSeed = flag.Uint64("raftlog.seed", 0, "seed for TestConformance (0: time-based)")

// TestConformance runs random operation sequences against raft.MemoryStorage and each
// engine (bbolt Storage, WAL) and compares every raft.Storage method after each step,
// including after Close+Open.
func TestConformance(t *testing.T) {
	seed := *conformanceSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -raftlog.seed=%d)", seed, seed)
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			for run := range 12 {
				t.Run(fmt.Sprint(run), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(seed, uint64(run)))
					opts := Options{NoSync: true, CacheEntries: []int{1, 3, 16, 10000}[run%4],
						SegmentSize: []int64{1, 200, 4096, 0}[run%4], Preallocate: []int64{0, 64, 777}[run%3]}
					runConformance(t, eng, rng, opts, 150)
				})
			}
		})
	}
}

func runConformance(t *testing.T, eng engine, rng *rand.Rand, opts Options, steps int) {
	ms := raft.NewMemoryStorage()
	s, path := eng.openTemp(t, opts)
	term := uint64(1)
	for step := range steps {
		first, _ := ms.FirstIndex()
		last, _ := ms.LastIndex()
		snap, _ := ms.Snapshot()
		snapIndex := snap.GetMetadata().GetIndex()
		var desc string
		var gotErr, wantErr error
		switch op := rng.IntN(10); {
		case op < 4: // append, often overlapping the suffix or the compacted prefix
			if rng.IntN(3) == 0 {
				term++
			}
			lo := last + 1
			if last >= first && rng.IntN(2) == 0 {
				lo = first - 1 + uint64(rng.IntN(int(last-first+2))) // may start at or before the dummy
				lo = max(lo, 1)
			}
			ents := mkEnts(lo, lo+uint64(rng.IntN(8)), term)
			var hs *raftpb.HardState
			if rng.IntN(2) == 0 {
				hs = &raftpb.HardState{Term: new(term), Vote: new(uint64(rng.IntN(3))), Commit: new(first - 1)}
			}
			desc = fmt.Sprintf("Save(nil, %v, [%d..%d]@%d)", hs, lo, lo+uint64(len(ents))-1, term)
			gotErr = s.Save(nil, hs, ents)
			wantErr = ms.Append(ents)
			if hs != nil {
				_ = ms.SetHardState(hs)
			}
		case op < 6: // compact, sometimes already compacted
			c := first - 1
			if last >= first && rng.IntN(4) != 0 {
				c = first + uint64(rng.IntN(int(last-first+1)))
			}
			desc = fmt.Sprintf("Compact(%d)", c)
			gotErr, wantErr = s.Compact(c), ms.Compact(c)
		case op < 8: // create a snapshot somewhere in [max(snap+1, first-1), last], or an old one
			lo := max(snapIndex+1, first-1)
			i := snapIndex
			if lo <= last && rng.IntN(4) != 0 {
				i = lo + uint64(rng.IntN(int(last-lo+1)))
			}
			var cs *raftpb.ConfState
			if rng.IntN(2) == 0 {
				cs = randConfState(rng)
			}
			data := []byte(fmt.Sprintf("snap-%d", i))
			desc = fmt.Sprintf("CreateSnapshot(%d, %v)", i, cs)
			got, err1 := s.CreateSnapshot(i, cs, data)
			want, err2 := ms.CreateSnapshot(i, cs, data)
			gotErr, wantErr = err1, err2
			if err1 == nil && err2 == nil && !proto.Equal(got, want) {
				t.Fatalf("step %d %s: snapshot %v, want %v", step, desc, got, want)
			}
		default: // install a snapshot received from a leader (maybe with entries after it)
			i := max(snapIndex+uint64(rng.IntN(int(max(last, snapIndex)-snapIndex)+6)), 1)
			term++
			sn := &raftpb.Snapshot{Data: []byte("installed"), Metadata: &raftpb.SnapshotMetadata{
				Index: new(i), Term: new(term), ConfState: randConfState(rng)}}
			var ents []*raftpb.Entry
			if rng.IntN(2) == 0 {
				ents = mkEnts(i+1, i+uint64(rng.IntN(4)), term)
			}
			hs := &raftpb.HardState{Term: new(term), Commit: new(i)}
			desc = fmt.Sprintf("Save(snap %d@%d, %v, %d ents)", i, term, hs, len(ents))
			gotErr = s.Save(sn, hs, ents)
			wantErr = ms.ApplySnapshot(sn)
			if wantErr == nil {
				_ = ms.Append(ents)
				_ = ms.SetHardState(hs)
			}
		}
		if !sameErr(gotErr, wantErr) {
			t.Fatalf("step %d %s: error %v, want %v", step, desc, gotErr, wantErr)
		}
		compareStorages(t, fmt.Sprintf("step %d %s", step, desc), ms, s)
		if rng.IntN(4) == 0 {
			s = eng.reopen(t, s, path, opts)
			compareStorages(t, fmt.Sprintf("step %d after reopen", step), ms, s)
		}
	}
}

func randConfState(rng *rand.Rand) *raftpb.ConfState {
	cs := &raftpb.ConfState{Voters: []uint64{1, 2, uint64(3 + rng.IntN(3))}}
	if rng.IntN(2) == 0 {
		cs.Learners = []uint64{9}
	}
	return raftpb.EnsureConfState(cs)
}

func sameErr(got, want error) bool {
	if got == nil || want == nil {
		return got == want
	}
	return errors.Is(got, want)
}

// compareStorages checks every raft.Storage method of s against ms over the whole range.
func compareStorages(t *testing.T, ctx string, ms *raft.MemoryStorage, s Log) {
	t.Helper()
	wantHS, wantCS, _ := ms.InitialState()
	gotHS, gotCS, err := s.InitialState()
	if err != nil || !proto.Equal(gotHS, wantHS) || !proto.Equal(gotCS, wantCS) {
		t.Fatalf("%s: InitialState %v %v %v, want %v %v", ctx, gotHS, gotCS, err, wantHS, wantCS)
	}
	wantSnap, _ := ms.Snapshot()
	if gotSnap, err := s.Snapshot(); err != nil || !proto.Equal(gotSnap, wantSnap) {
		t.Fatalf("%s: Snapshot %v %v, want %v", ctx, gotSnap, err, wantSnap)
	}
	first, _ := ms.FirstIndex()
	last, _ := ms.LastIndex()
	if got, err := s.FirstIndex(); err != nil || got != first {
		t.Fatalf("%s: FirstIndex %d %v, want %d", ctx, got, err, first)
	}
	if got, err := s.LastIndex(); err != nil || got != last {
		t.Fatalf("%s: LastIndex %d %v, want %d", ctx, got, err, last)
	}
	if s.HasState() != (wantHS != nil || last > 0 || wantSnap.GetMetadata().GetIndex() > 0) {
		t.Fatalf("%s: HasState %v", ctx, s.HasState())
	}
	for i := max(first, 2) - 2; i <= last+1; i++ {
		want, wantErr := ms.Term(i)
		got, gotErr := s.Term(i)
		if got != want || !sameErr(gotErr, wantErr) {
			t.Fatalf("%s: Term(%d) = %d %v, want %d %v", ctx, i, got, gotErr, want, wantErr)
		}
	}
	for lo := max(first, 1) - 1; lo <= last+1; lo++ {
		for hi := lo; hi <= min(last+1, lo+12); hi++ {
			for _, maxSize := range []uint64{0, 20, 45, math.MaxUint64} {
				want, wantErr := ms.Entries(lo, hi, maxSize)
				got, gotErr := s.Entries(lo, hi, maxSize)
				if !sameErr(gotErr, wantErr) || !sameEntries(got, want) {
					t.Fatalf("%s: Entries(%d, %d, %d) = %v %v, want %v %v", ctx, lo, hi, maxSize, got, gotErr, want, wantErr)
				}
			}
		}
	}
}

func sameEntries(a, b []*raftpb.Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
