package raftlog

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// TestEntryIndex: the index read from an encoded entry without decoding it is
// the entry's own, whatever fields come around it.
func TestEntryIndex(t *testing.T) {
	for _, e := range []*raftpb.Entry{
		{Index: new(uint64(1))},
		{Index: new(uint64(1 << 40)), Term: new(uint64(7)), Data: []byte("payload")},
		{Type: raftpb.EntryType_EntryConfChangeV2.Enum(), Term: new(uint64(3)), Index: new(uint64(300)), Data: make([]byte, 1000)},
	} {
		b, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := entryIndex(b); !ok || got != e.GetIndex() {
			t.Errorf("entryIndex(%v) = %d, %v; want %d", e, got, ok, e.GetIndex())
		}
		if _, ok := entryIndex(b[:len(b)-1]); ok && len(e.GetData()) > 0 {
			t.Errorf("entryIndex of a cut encoding of %v reports an index", e)
		}
	}
}

// TestWALReopenAfterCompaction: a WAL reopened after its tail segment's
// history was compacted many times holds the same log as one replayed with
// every entry decoded, and the entries it skipped are none that it keeps.
func TestWALReopenAfterCompaction(t *testing.T) {
	dir := t.TempDir()
	w, err := OpenWAL(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	const total = 5000
	for lo := uint64(1); lo <= total; lo += 100 {
		if err := w.Save(nil, &raftpb.HardState{Term: new(uint64(1)), Commit: new(lo + 99)}, mkEnts(lo, lo+100, 1)); err != nil {
			t.Fatal(err)
		}
		if lo > 1000 {
			if err := w.Compact(lo - 1000); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w, err = OpenWAL(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	segs, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	if f := replayFloor(segs); f != w.st.dummyIndex || f == 0 {
		t.Fatalf("floor %d, compaction point %d", f, w.st.dummyIndex)
	}
	full := &WAL{dir: dir, log: w.log}
	if _, err := full.replay(segs, 0); err != nil {
		t.Fatal(err)
	}
	if full.st.dummyIndex != w.st.dummyIndex || full.st.last != w.st.last || len(full.st.ents) != len(w.st.ents) {
		t.Fatalf("floored replay (%d, %d] %d entries; full replay (%d, %d] %d entries",
			w.st.dummyIndex, w.st.last, len(w.st.ents), full.st.dummyIndex, full.st.last, len(full.st.ents))
	}
	for i := range full.st.ents {
		if !proto.Equal(full.st.ents[i], w.st.ents[i]) {
			t.Fatalf("entry %d: floored %v, full %v", full.st.base+uint64(i), w.st.ents[i], full.st.ents[i])
		}
	}
}

// TestWALFloorNotKept: should replay end below the floor it was given (which
// replayFloor never gives), settled says so, and load replays in full.
func TestWALFloorNotKept(t *testing.T) {
	st := newWalState()
	st.floor = 10
	st.last = 0
	for i := uint64(1); i <= 20; i++ {
		e := &raftpb.Entry{Index: new(i), Term: new(uint64(1))}
		b, _ := proto.Marshal(e)
		if err := st.apply(recEntry, b); err != nil {
			t.Fatal(err)
		}
	}
	if st.settled() {
		t.Fatal("entries 1..10 were skipped and never compacted, yet replay counts as settled")
	}
	if err := st.compact(10, 1); err != nil {
		t.Fatal(err)
	}
	if !st.settled() {
		t.Fatal("compacted past the floor, yet replay does not count as settled")
	}
}
