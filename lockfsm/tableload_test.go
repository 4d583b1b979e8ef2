package lockfsm

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
	"unsafe"
)

// A table loaded whole — from the state file on Open, from a snapshot on Restore — keeps one copy of
// each owner string while there are at most maxInternedOwners of them, and is the same state either way.
// (The memory a restarted or new member spends per held lock; the scale issue's RSS figure.)
func TestLoadSharesOwnerStrings(t *testing.T) {
	const owners, perOwner = 3, 4
	dir := t.TempDir()
	src := mustOpen(t, filepath.Join(dir, "src.db"), Options{NoSync: true})
	idx := uint64(1)
	src.ApplyCommand(idx, &Command{Kind: KindOpenSession, Node: 1, TTLMillis: 5000}, nil)
	for i := range owners * perOwner {
		idx++
		c := Command{Kind: KindAcquire, Session: 1, Seq: uint64(i + 1), Name: fmt.Sprintf("n/%02d", i),
			Owner: fmt.Sprintf("owner-%d", i%owners)}
		if r, _ := src.ApplyCommand(idx, &c, nil); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	want := snapshotBytes(t, src)
	if err := src.commit(); err != nil {
		t.Fatal(err)
	}
	_ = src.Close()
	reopened := mustOpen(t, filepath.Join(dir, "src.db"), Options{NoSync: true})
	defer func() { _ = reopened.Close() }()
	restored := openTemp(t, "restored.db")
	if err := restored.Restore(bytes.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]*FSM{"opened": reopened, "restored": restored} {
		if !bytes.Equal(want, snapshotBytes(t, f)) {
			t.Fatalf("%s: state differs from the source's", name)
		}
		copies := map[string]map[*byte]bool{}
		for l := range f.locks.all() {
			o := l.holds()[0].owner
			if copies[o] == nil {
				copies[o] = map[*byte]bool{}
			}
			copies[o][unsafe.StringData(o)] = true
		}
		if len(copies) != owners {
			t.Fatalf("%s: %d owners, want %d", name, len(copies), owners)
		}
		for o, c := range copies {
			if len(c) != 1 {
				t.Errorf("%s: owner %q has %d copies in memory, want 1", name, o, len(c))
			}
		}
	}
}

// The sharing is bounded: past maxInternedOwners distinct owners, later ones are copied per hold, and
// the strings are right either way.
func TestSharedOwnerBounded(t *testing.T) {
	owners := make(map[string]string)
	for i := range maxInternedOwners + 10 {
		if got, want := sharedOwner(owners, []byte(fmt.Sprint(i))), fmt.Sprint(i); got != want {
			t.Fatalf("sharedOwner = %q, want %q", got, want)
		}
	}
	if len(owners) != maxInternedOwners {
		t.Fatalf("%d owners kept, want the bound %d", len(owners), maxInternedOwners)
	}
	late := []byte(fmt.Sprint(maxInternedOwners + 5))
	if a, b := sharedOwner(owners, late), sharedOwner(owners, late); unsafe.StringData(a) == unsafe.StringData(b) {
		t.Fatal("an owner past the bound was shared")
	}
	if sharedOwner(owners, nil) != "" || sharedOwner(nil, []byte("x")) != "x" {
		t.Fatal("empty bytes or no table: want the plain string")
	}
}

// A held mutex's entry is 96 bytes, a Go size class (160 before the queue, the delay's token and the
// holds beyond the first moved to lockExt; 112 before a hold's mode and permits shared a word and the
// lock's flags shrank to four bytes): at a million held locks every byte here is a megabyte on every
// replica (the scale issue's RSS per held lock). A field added to lock or hold lands in this test.
func TestLockEntrySize(t *testing.T) {
	if got := unsafe.Sizeof(hold{}); got > 64 {
		t.Fatalf("hold is %d bytes, want at most 64", got)
	}
	if got := unsafe.Sizeof(lock{}); got > 96 {
		t.Fatalf("lock is %d bytes, want at most 96: move what a held mutex does not need to lockExt", got)
	}
}

// TestModePermitsPacked: a hold's mode and permits come back as packed, at MaxPermits too.
func TestModePermitsPacked(t *testing.T) {
	for _, m := range []Mode{ModeExclusive, ModeShared, modeEnd - 1} {
		for _, p := range []uint32{0, 1, 7, MaxPermits - 1, MaxPermits} {
			h := hold{mp: packMode(m, p)}
			if h.mode() != m || h.permits() != p {
				t.Fatalf("packed mode %d permits %d, got back %d and %d", m, p, h.mode(), h.permits())
			}
		}
	}
}
