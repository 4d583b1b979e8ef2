package lockfsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// scanStats is Stats the slow way: one pass over every name.
func scanStats(f *FSM) TableStats {
	st := TableStats{Names: f.locks.len(), Sessions: len(f.sessions)}
	for l := range f.locks.all() {
		if l.held() {
			st.Held++
		}
		if l.delayed {
			st.Delayed++
		}
		st.Waiters += len(l.waiters())
		st.LongestQueue = max(st.LongestQueue, len(l.waiters()))
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

// TestLocksPageFromTheFileAgreesWithAScan: a page read along the file's sorted names, merged with the
// names changed since (the dirty set, and batches prepared but not written yet), is exactly the page a
// pass over the whole table gives, for any prefix, continuation and limit, at any point of a stream with
// commits, batches in flight and a restore.
func TestLocksPageFromTheFileAgreesWithAScan(t *testing.T) {
	pages := 0
	for seed := range uint64(30) {
		r := rand.New(rand.NewPCG(seed, 7))
		data := make([]byte, 1500)
		for i := range data {
			data[i] = byte(r.IntN(256))
		}
		_, entries, _ := genApply(data, memFSM(), nil)
		f := openTemp(t, "page.db")
		var inFlight []*CommitBatch
		check := func(at string) {
			for range 4 {
				prefix := []string{"", "", "a", "s", "x"}[r.IntN(5)] // the stream's names are genAny's
				after := ""
				if r.IntN(2) == 0 {
					after = string(rune('a' + r.IntN(26)))
				}
				limit := 1 + r.IntN(6)
				got, gotMore := f.LocksPage(prefix, after, limit)
				want, wantMore := f.scanPage(prefix, after, max(limit, 1))
				if gotMore != wantMore || fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("seed %d, %s: LocksPage(%q, %q, %d) = %v more %v; a scan gives %v more %v",
						seed, at, prefix, after, limit, names(got), gotMore, names(want), wantMore)
				}
				pages++
			}
		}
		for i, e := range entries {
			f.Apply(uint64(i+1), e, nil)
			switch r.IntN(6) {
			case 0: // a batch handed to the writer, written later
				inFlight = append(inFlight, f.PrepareCommit())
			case 1: // the writer catches up
				for _, b := range inFlight {
					if err := f.WriteCommit(b); err != nil {
						t.Fatal(err)
					}
				}
				inFlight = nil
			}
			if i%5 == 0 {
				check(fmt.Sprintf("entry %d", i+1))
			}
		}
		for _, b := range inFlight {
			if err := f.WriteCommit(b); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.WriteCommit(f.PrepareCommit()); err != nil { // nothing dirty: memory is the file
			t.Fatal(err)
		}
		check("all written")
		// A restore of another table (an early state of the stream: few names, or none): the file is
		// replaced before memory is.
		other := memFSM()
		for i, e := range entries[:3] {
			other.Apply(uint64(i+1), e, nil)
		}
		rs, err := ReadRestore(bytes.NewReader(snapshotBytes(t, other)))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.WriteRestore(rs); err != nil {
			t.Fatal(err)
		}
		check("restore written, not installed")
		f.InstallRestore(rs)
		check("restore installed")

		// A restore installed as soon as it is verified, and applied on, while the file is still being
		// written (a member catching up from a leader's snapshot): the file holds the old table (other's),
		// memory the snapshot's (half the stream) and what is applied after it.
		half := memFSM()
		for j, e := range entries[:len(entries)/2] {
			half.Apply(uint64(j+1), e, nil)
		}
		rs, err = ReadRestore(bytes.NewReader(snapshotBytes(t, half)))
		if err != nil {
			t.Fatal(err)
		}
		i := 0
		if err := f.WriteRestoreFrom(func() (*RestoreRecords, bool) {
			if i == len(rs.records) {
				return nil, false
			}
			i++
			return rs.records[i-1], true
		}, func() (*Restored, error) {
			check("restore verified, not written, not installed")
			f.InstallRestore(rs)
			check("restore installed, not written")
			for j, e := range entries[len(entries)/2:] {
				at := uint64(len(entries)/2 + j + 1)
				f.Apply(at, e, nil)
				if j%7 == 0 {
					check(fmt.Sprintf("restore installed, not written, entry %d applied on", at))
				}
			}
			return rs, nil
		}); err != nil {
			t.Fatal(err)
		}
		check("restore installed, then written")
		if err := f.WriteCommit(f.PrepareCommit()); err != nil {
			t.Fatal(err)
		}
		check("restore written, entries after it committed")
	}
	t.Logf("%d pages compared", pages)
}

func names(p []LockInfo) []string {
	var s []string
	for _, li := range p {
		s = append(s, li.Name)
	}
	return s
}
