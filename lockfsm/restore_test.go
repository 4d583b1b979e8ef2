package lockfsm

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
)

// restoreWhileReading restores snap into f as a member installing a leader's snapshot does: one goroutine
// reads and verifies, up to ahead runs of records ahead of f's writer, which puts them into the file. It
// returns how many runs the writer was handed before the verdict.
func restoreWhileReading(f *FSM, snap []byte, ahead int) (runs int, err error) {
	recs := make(chan *RestoreRecords, ahead)
	type result struct {
		rs  *Restored
		err error
	}
	read := make(chan result, 1)
	go func() {
		rs, err := ReadRestoreTo(bytes.NewReader(snap), func(rr *RestoreRecords) { recs <- rr })
		close(recs)
		read <- result{rs, err}
	}()
	var rs *Restored
	err = f.WriteRestoreFrom(func() (*RestoreRecords, bool) {
		rr, ok := <-recs
		if ok {
			runs++
		}
		return rr, ok
	}, func() (*Restored, error) {
		r := <-read
		rs = r.rs
		return r.rs, r.err
	})
	if err == nil {
		f.InstallRestore(rs)
	}
	return runs, err
}

// heldTable applies n acquires of distinct names over a few sessions: a table of more records than one run
// of RestoreRecords holds.
func heldTable(t *testing.T, f *FSM, n int) {
	t.Helper()
	const sessions = 7
	idx := f.AppliedIndex()
	var ids, seq [sessions]uint64
	for s := range ids {
		idx++
		f.ApplyCommand(idx, &Command{Kind: KindOpenSession, Node: uint64(s + 1), TTLMillis: 5000}, nil)
		ids[s] = idx // a session's id is the index that opened it
	}
	for i := range n {
		s := i % sessions
		seq[s]++
		idx++
		c := Command{Kind: KindAcquire, Session: ids[s], Seq: seq[s], Name: fmt.Sprintf("held/%05d", i), Owner: fmt.Sprintf("o%d", i%3)}
		if r, _ := f.ApplyCommand(idx, &c, nil); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
}

// reopened closes f and opens its file again: the state a restart finds.
func reopened(t *testing.T, f *FSM, path string) *FSM {
	t.Helper()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g := mustOpen(t, path, Options{NoSync: true})
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// TestRestoreWhileReading (S7): a snapshot restored while it is read leaves the same table in memory and
// in the state file as the snapshot holds, for the current format and the old one; a damaged snapshot,
// whose records reach the file's transaction before the damage is found, leaves the file as it was; and a
// writer that cannot write still takes every run, so the reader is never left blocked.
func TestRestoreWhileReading(t *testing.T) {
	src := openTemp(t, "src.db")
	if _, err := runStream(t, src, randomStream(t, 300)); err != nil {
		t.Fatal(err)
	}
	heldTable(t, src, 3*restoreBatch+17)
	snap := snapshotBytes(t, src)

	for _, c := range []struct {
		name string
		snap []byte
	}{{"current", snap}, {"version 2", readCompat(t, "snapshot-v2.bin")}} {
		t.Run(c.name, func(t *testing.T) {
			want := openTemp(t, "want.db")
			if err := want.Restore(bytes.NewReader(c.snap)); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "dst.db")
			dst := mustOpen(t, path, Options{NoSync: true})
			if _, err := restoreWhileReading(dst, c.snap, 0); err != nil {
				t.Fatal(err)
			}
			if got := snapshotBytes(t, dst); !bytes.Equal(got, snapshotBytes(t, want)) {
				t.Fatal("restored table differs from the snapshot's")
			}
			if dst.DurableIndex() != want.AppliedIndex() {
				t.Fatalf("durable %d, want %d", dst.DurableIndex(), want.AppliedIndex())
			}
			if got := snapshotBytes(t, reopened(t, dst, path)); !bytes.Equal(got, snapshotBytes(t, want)) {
				t.Fatal("the state file, reopened, differs from the snapshot's table")
			}
		})
	}

	// The member's own table before the restore, committed to its file.
	path := filepath.Join(t.TempDir(), "dst.db")
	dst := mustOpen(t, path, Options{NoSync: true})
	heldTable(t, dst, 50)
	if err := dst.WriteCommit(dst.PrepareCommit()); err != nil {
		t.Fatal(err)
	}
	before := snapshotBytes(t, dst)
	bad := [][]byte{snap[:len(snap)-1], snap[:len(snap)-2*len(snap)/3], append(bytes.Clone(snap), 0)}
	for i := len(snap) / 2; i < len(snap); i += max(1, len(snap)/40) {
		c := bytes.Clone(snap)
		c[i] ^= 0x5a
		bad = append(bad, c)
	}
	sum := bytes.Clone(snap)
	sum[len(sum)-1] ^= 1 // only the checksum: every record reaches the file first
	bad = append(bad, sum)
	for i, b := range bad {
		runs, err := restoreWhileReading(dst, b, 0)
		if !errors.Is(err, errCorrupt) {
			t.Fatalf("case %d: want errCorrupt, got %v", i, err)
		}
		if !bytes.Equal(before, snapshotBytes(t, dst)) {
			t.Fatalf("case %d: failed restore changed the table in memory", i)
		}
		if i == len(bad)-1 && runs < 3 {
			t.Fatalf("the damaged checksum's case handed the writer %d runs: it tests nothing", runs)
		}
		if dst.DurableIndex() != dst.AppliedIndex() {
			t.Fatalf("case %d: durable index moved to %d", i, dst.DurableIndex())
		}
	}
	dst = reopened(t, dst, path)
	if !bytes.Equal(before, snapshotBytes(t, dst)) {
		t.Fatal("a failed restore changed the state file")
	}

	// A closed FSM refuses, after taking every run.
	closed := mustOpen(t, filepath.Join(t.TempDir(), "closed.db"), Options{NoSync: true})
	_ = closed.Close()
	if runs, err := restoreWhileReading(closed, snap, 0); err == nil || runs < 3 {
		t.Fatalf("closed FSM: %d runs, err %v", runs, err)
	}
}
