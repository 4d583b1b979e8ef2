package lockfsm

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// scanStats is Stats the slow way: one pass over every name.
func scanStats(f *FSM) TableStats {
	st := TableStats{Names: len(f.locks), Sessions: len(f.sessions)}
	for _, l := range f.locks {
		if l.held() {
			st.Held++
		}
		if l.delayed {
			st.Delayed++
		}
		st.Waiters += len(l.waiters)
		st.LongestQueue = max(st.LongestQueue, len(l.waiters))
	}
	return st
}

// TestStatsKeptAsTheTableChanges: the counts metrics and status read are kept as the table changes, and
// agree with a pass over the whole table after any stream of commands (every primitive, queues that
// grow and shrink, expiries and lock-delays), whether the changes were committed in between or not,
// and after the table is reopened from its file or restored from a snapshot.
func TestStatsKeptAsTheTableChanges(t *testing.T) {
	var seen TableStats // the most of each the streams reached: they must cover what is counted
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 99))
		data := make([]byte, 1200)
		for i := range data {
			data[i] = byte(r.IntN(256))
		}
		entries := func() [][]byte { _, e, _ := genApply(data, memFSM(), nil); return e }()
		f := openTemp(t, "stats.db")
		every := 1 + r.IntN(9) // commits every few entries; Stats read at other strides
		for i, e := range entries {
			f.Apply(uint64(i+1), e, nil)
			if i%every == 0 {
				b := f.PrepareCommit()
				if err := f.WriteCommit(b); err != nil {
					t.Fatal(err)
				}
			}
			if i%7 == 3 {
				got, want := f.Stats(), scanStats(f)
				if got != want {
					t.Fatalf("seed %d, entry %d: Stats %+v, a pass over the table %+v", seed, i+1, got, want)
				}
				seen.Held, seen.Delayed = max(seen.Held, got.Held), max(seen.Delayed, got.Delayed)
				seen.LongestQueue = max(seen.LongestQueue, got.LongestQueue)
			}
		}
		if got, want := f.Stats(), scanStats(f); got != want {
			t.Fatalf("seed %d, end: Stats %+v, a pass over the table %+v", seed, got, want)
		}
		want := scanStats(f)
		snap := snapshotBytes(t, f)
		g := openTemp(t, "restored.db")
		if err := g.Restore(bytes.NewReader(snap)); err != nil {
			t.Fatal(err)
		}
		if got := g.Stats(); got != want {
			t.Fatalf("seed %d, restored: Stats %+v, want %+v", seed, got, want)
		}
		if err := f.commit(); err != nil {
			t.Fatal(err)
		}
		path := f.path
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		h := mustOpen(t, path, Options{NoSync: true})
		if got := h.Stats(); got != want {
			t.Fatalf("seed %d, reopened: Stats %+v, want %+v", seed, got, want)
		}
		h.Close()
	}
	if seen.Held < 2 || seen.Delayed < 1 || seen.LongestQueue < 3 {
		t.Fatalf("the streams did not reach the states counted: at most %+v", seen)
	}
	t.Logf("streams reached at most %+v", seen)
}
