package lockfsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	bolt "go.etcd.io/bbolt"
)

func randomStream(t *testing.T, n int) []Command {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, 3*n)
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	return genCommands(b)
}

// TestCrashReplay: apply, commit, apply more, Close WITHOUT commit, reopen, replay the tail from
// DurableIndex: the snapshot equals the uninterrupted run's, byte for byte. fsync is on.
func TestCrashReplay(t *testing.T) {
	entries, want := referenceRun(t)

	path := filepath.Join(t.TempDir(), "crash.db")
	f := mustOpen(t, path, Options{})
	commitAt := len(entries) / 3
	for i, e := range entries[:2*len(entries)/3] {
		f.Apply(uint64(i+1), e, nil)
		if i+1 == commitAt || i+1 == commitAt/2 {
			if err := f.commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := f.Close(); err != nil { // crash: the last third of the applied entries is not committed
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	g := mustOpen(t, path, Options{})
	defer func() { _ = g.Close() }()
	if g.DurableIndex() != uint64(commitAt) || g.AppliedIndex() != uint64(commitAt) {
		t.Fatalf("reopened at durable %d applied %d, want %d", g.DurableIndex(), g.AppliedIndex(), commitAt)
	}
	for i, e := range entries {
		if r, _ := g.Apply(uint64(i+1), e, nil); uint64(i+1) <= g.DurableIndex() && !errors.Is(r.Err, errAlreadyApplied) {
			t.Fatalf("index %d re-applied: %+v", i+1, r)
		}
	}
	if !bytes.Equal(want, snapshotBytes(t, g)) {
		t.Fatal("replay after crash differs from the uninterrupted run")
	}
	// And the committed file alone (commit, reopen) holds exactly that state.
	checkCommitted(t, g, path, want)
}

func wantCorrupt(t *testing.T, path string, err error) {
	t.Helper()
	if err == nil || !errors.Is(err, errCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("want ErrCorrupt naming %s, got %v", path, err)
	}
}

// TestOpenCorrupt: random bytes, truncated files and a foreign bbolt file are refused with errCorrupt
// naming the file, never a panic.
func TestOpenCorrupt(t *testing.T) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(3, 4))

	junk := filepath.Join(dir, "junk.db")
	b := make([]byte, 64<<10)
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	if err := os.WriteFile(junk, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(junk, Options{})
	wantCorrupt(t, junk, err)

	// A real state file with data, then truncated at several lengths.
	good := filepath.Join(dir, "good.db")
	f := mustOpen(t, good, Options{})
	if _, err := runStream(t, f, randomStream(t, 300)); err != nil {
		t.Fatal(err)
	}
	if err := f.commit(); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	full, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{100, 4096, 8192 + 17, 3 * 4096, len(full) / 2, len(full) - 4096} {
		if n <= 0 || n >= len(full) {
			continue
		}
		p := filepath.Join(dir, fmt.Sprintf("trunc-%d.db", n))
		if err := os.WriteFile(p, full[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		g, err := Open(p, Options{})
		if err == nil {
			// bbolt may not notice a truncation that only cut free pages; then the state must still load.
			_ = g.Close()
			t.Logf("truncation to %d of %d bytes went unnoticed (only unused pages cut)", n, len(full))
			continue
		}
		wantCorrupt(t, p, err)
	}

	// A valid bbolt file that is not ours.
	foreign := filepath.Join(dir, "foreign.db")
	db, err := bolt.Open(foreign, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucket([]byte("other"))
		if err != nil {
			return err
		}
		return bk.Put([]byte("k"), []byte("v"))
	}); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	_, err = Open(foreign, Options{})
	wantCorrupt(t, foreign, err)
}

// TestRestoreCorrupt: a damaged snapshot is refused with errCorrupt and leaves the FSM as it was.
func TestRestoreCorrupt(t *testing.T) {
	src := openTemp(t, "src.db")
	if _, err := runStream(t, src, randomStream(t, 300)); err != nil {
		t.Fatal(err)
	}
	snap := snapshotBytes(t, src)
	dst := openTemp(t, "dst.db")
	dst.ApplyCommand(1, &Command{Kind: KindOpenSession, Node: 9}, nil)
	before := snapshotBytes(t, dst)
	bad := [][]byte{nil, snap[:len(snap)-1], snap[:len(snap)/2], append(bytes.Clone(snap), 0)}
	for i := 0; i < len(snap); i += max(1, len(snap)/50) {
		c := bytes.Clone(snap)
		c[i] ^= 0x5a
		bad = append(bad, c)
	}
	for i, b := range bad {
		if err := dst.Restore(bytes.NewReader(b)); !errors.Is(err, errCorrupt) {
			t.Fatalf("case %d: want ErrCorrupt, got %v", i, err)
		}
		if !bytes.Equal(before, snapshotBytes(t, dst)) {
			t.Fatalf("case %d: failed restore changed the state", i)
		}
	}
	if err := dst.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap, snapshotBytes(t, dst)) {
		t.Fatal("restore is not byte-identical")
	}
}

// TestCommandRoundTrip: every field survives encoding, in both versions; malformed bytes are errBadCommand
// and entries of a newer format ErrNewerFormat (never both); encoding does not allocate.
func TestCommandRoundTrip(t *testing.T) {
	c := Command{Kind: KindAcquire, Session: 1 << 40, Seq: 7, AckedBelow: 5, Name: "stock/sku-42", Owner: "worker-1",
		Wait: true, LeaseMillis: 3000, TTLMillis: 9, LockDelayMillis: 11, MaxHolds: 4, Node: 3, Token: 99,
		Target: 6, Mode: ModeShared, Permits: 2, ExtraNames: []string{"x", ""}, Primitive: PrimSemaphore,
		Limit: 1 << 20, Value: "v\x00w", Version: 2}
	b := c.AppendEncode(nil)
	got, err := DecodeCommand(b)
	if err != nil || !commandsEqual(c, got) {
		t.Fatalf("round trip: %v\n%+v\n%+v", err, c, got)
	}
	// A command version 1 can carry, asked for as version 1 (its reserved fields included).
	v1 := c
	v1.Primitive, v1.Limit, v1.Value, v1.Version = 0, 0, "", 1
	if b1 := v1.AppendEncode(nil); b1[0] != 1 {
		t.Fatalf("version 1 asked, %d written", b1[0])
	} else if got, err := DecodeCommand(b1); err != nil || !commandsEqual(v1, got) {
		t.Fatalf("version 1 round trip: %v\n%+v\n%+v", err, v1, got)
	}
	// Version 0 picks the lowest version with the same meaning.
	for _, x := range []struct {
		c    Command
		want byte
	}{
		{Command{Kind: KindAcquire, Name: "a", Owner: "o", Permits: 1}, 1},
		{Command{Kind: KindAcquire, Name: "a", Owner: "o", Mode: ModeShared}, 2},
		{Command{Kind: KindAcquire, Name: "a", Owner: "o", ExtraNames: []string{"b"}}, 2},
		{Command{Kind: KindAcquire, Name: "a", Owner: "o", Primitive: PrimElection}, 2},
		{Command{Kind: KindExpireLease, Name: "a", Token: 3}, 1},
		{Command{Kind: KindExpireLease, Name: "a", Token: 3, Session: 2}, 2},
		{Command{Kind: KindProclaim, Name: "a", Owner: "o"}, 2},
		{Command{Kind: KindCloseSession, Session: 1}, 1},
		{Command{Kind: KindCloseSession, Session: 1, Limit: 8}, 3},
		{Command{Kind: KindExpireSession, Session: 1, Limit: 8, LockDelayMillis: 5}, 3},
		{Command{Kind: KindCloseSession, Session: 1, Limit: 8, Version: 2}, 2},
		{Command{Kind: KindEndSessionRun, Session: 1, Limit: 8}, 3},
	} {
		if got := x.c.AppendEncode(nil)[0]; got != x.want {
			t.Fatalf("%+v: version %d, want %d", x.c, got, x.want)
		}
	}
	for _, g := range [][]byte{nil, {1}, {0, 1, 0}, {1, 0, 0}, {1, 99, 0}, {1, 10, 0}, {1, 5, 0x80},
		{1, 5, 0x80, 0x80, 0x08}, {1, 5, 0x80, 0x80, 0x04}, append(bytes.Clone(b), 0), b[:len(b)-1]} {
		if _, err := DecodeCommand(g); !errors.Is(err, errBadCommand) || errors.Is(err, ErrNewerFormat) {
			t.Fatalf("%x: want ErrBadCommand, got %v", g, err)
		}
	}
	for _, g := range [][]byte{{4}, {4, 5, 0}, {2, 12, 0}, {3, 13, 0}, {2, 99, 0}, {2, 5, 0x80, 0x80, 0x40},
		{2, 5, 0x80, 0x80, 0x08, 4}, {2, 5, 0x80, 0x40, 2}} {
		if _, err := DecodeCommand(g); !errors.Is(err, ErrNewerFormat) || errors.Is(err, errBadCommand) {
			t.Fatalf("%x: want ErrNewerFormat, got %v", g, err)
		}
	}
	if n := testing.AllocsPerRun(100, func() { b = c.AppendEncode(b[:0]) }); n != 0 {
		t.Fatalf("AppendEncode allocates %v times", n)
	}
}

func commandsEqual(a, b Command) bool {
	return fmt.Sprintf("%#v", a) == fmt.Sprintf("%#v", b)
}

// TestRetainedBound: a session keeps at most maxRetainedResults results; evicted seqs become stale.
func TestRetainedBound(t *testing.T) {
	f := openTemp(t, "bound.db")
	f.ApplyCommand(1, &Command{Kind: KindOpenSession}, nil)
	idx := uint64(1)
	for seq := uint64(1); seq <= maxRetainedResults+10; seq++ {
		idx++
		f.ApplyCommand(idx, &Command{Kind: KindRelease, Session: 1, Seq: seq, Name: "n", Owner: "o"}, nil)
	}
	if got := f.Sessions()[0].Retained; got != maxRetainedResults {
		t.Fatalf("retained %d, want %d", got, maxRetainedResults)
	}
	idx++
	if r, _ := f.ApplyCommand(idx, &Command{Kind: KindAcquire, Session: 1, Seq: 10, Name: "n", Owner: "o"}, nil); !errors.Is(r.Err, errStaleSequence) {
		t.Fatalf("evicted seq: %+v", r)
	}
	idx++
	if r, _ := f.ApplyCommand(idx, &Command{Kind: KindAcquire, Session: 1, Seq: 11, Name: "n", Owner: "o"}, nil); !r.Duplicate {
		t.Fatalf("lowest retained seq: %+v", r)
	}
}

// TestPrepareWriteCommit: batches prepared at several points and written while entries go on being
// applied (as the node's committer does) leave the file at the last written batch's index; replaying
// the rest from there gives the uninterrupted run's state, byte for byte; and a final commit after the
// batches writes exactly the in-memory state.
func TestPrepareWriteCommit(t *testing.T) {
	entries, want := referenceRun(t)

	path := filepath.Join(t.TempDir(), "batches.db")
	f := mustOpen(t, path, Options{})
	var pending *CommitBatch
	var written uint64
	for i, e := range entries[:3*len(entries)/4] {
		f.Apply(uint64(i+1), e, nil)
		if (i+1)%37 == 0 {
			if pending != nil { // written one batch late: entries were applied in between
				if err := f.WriteCommit(pending); err != nil {
					t.Fatal(err)
				}
				written = pending.Applied()
			}
			pending = f.PrepareCommit()
			if f.DurableIndex() != written {
				t.Fatalf("durable %d, want %d", f.DurableIndex(), written)
			}
		}
	}
	_ = f.Close() // crash with one batch prepared but never written
	g := mustOpen(t, path, Options{})
	if g.DurableIndex() != written || g.AppliedIndex() != written || written == 0 {
		t.Fatalf("reopened at durable %d applied %d, want %d", g.DurableIndex(), g.AppliedIndex(), written)
	}
	for i, e := range entries {
		g.Apply(uint64(i+1), e, nil)
		if i == len(entries)/2 {
			if err := g.WriteCommit(g.PrepareCommit()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !bytes.Equal(want, snapshotBytes(t, g)) {
		t.Fatal("replay after the batches differs from the uninterrupted run")
	}
	checkCommitted(t, g, path, want)
}

// TestWriteDurableSnapshot (S7): a snapshot written from the file, while the in-memory state has moved on,
// has the bytes WriteSnapshot gave at the committed index, and restores to that state. This is what lets
// the node write snapshots off its loop.
func TestWriteDurableSnapshot(t *testing.T) {
	cmds := randomStream(t, 400)
	f := openTemp(t, "durable.db")
	entries, err := runStream(t, f, cmds[:200])
	if err != nil {
		t.Fatal(err)
	}
	b := f.PrepareCommit()
	atCommit := snapshotBytes(t, f)
	// Apply more (the loop goes on) before the batch is even written.
	for i, c := range cmds[200:] {
		f.Apply(uint64(len(entries)+i+1), c.AppendEncode(nil), nil)
	}
	if err := f.WriteCommit(b); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	applied, err := f.WriteDurableSnapshot(&got)
	if err != nil {
		t.Fatal(err)
	}
	if applied != b.Applied() || applied != 200 {
		t.Fatalf("durable snapshot at %d, want %d", applied, b.Applied())
	}
	if !bytes.Equal(atCommit, got.Bytes()) {
		t.Fatal("the snapshot from the file differs from the in-memory snapshot at the committed index")
	}
	if bytes.Equal(got.Bytes(), snapshotBytes(t, f)) {
		t.Fatal("premise: the in-memory state must have moved past the commit")
	}
	g := openTemp(t, "restored.db")
	if err := g.Restore(bytes.NewReader(got.Bytes())); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(atCommit, snapshotBytes(t, g)) {
		t.Fatal("restore of the durable snapshot differs")
	}
	// A damaged record in the file fails the snapshot rather than being copied into it.
	if err := f.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLocks).Put([]byte("zz-broken"), []byte{9, 9})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteDurableSnapshot(io.Discard); !errors.Is(err, errCorrupt) {
		t.Fatalf("damaged record: %v, want ErrCorrupt", err)
	}
}

// checkCommitted commits f, closes it, and checks that the file at path then holds the state whose
// snapshot is want.
func checkCommitted(t *testing.T, f *FSM, path string, want []byte) {
	t.Helper()
	if err := f.commit(); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	checkReopened(t, path, want, "committed file differs from the in-memory state")
}

// checkReopened opens the state file at path afresh and fails with msg unless it holds the state whose
// snapshot is want.
func checkReopened(t *testing.T, path string, want []byte, msg string) {
	t.Helper()
	f := mustOpen(t, path, Options{})
	defer func() { _ = f.Close() }()
	if !bytes.Equal(want, snapshotBytes(t, f)) {
		t.Fatal(msg)
	}
}

// referenceRun applies a random stream of 400 commands to a fresh FSM and returns the entries and the
// snapshot of the state they lead to.
func referenceRun(t *testing.T) (entries [][]byte, want []byte) {
	t.Helper()
	ref := openTemp(t, "ref.db")
	entries, err := runStream(t, ref, randomStream(t, 400))
	if err != nil {
		t.Fatal(err)
	}
	return entries, snapshotBytes(t, ref)
}

// DecodeCommandView's strings point into the bytes it decoded (no copy), and
// DecodeCommand's do not.
func TestDecodeCommandViewAliases(t *testing.T) {
	b := (&Command{Kind: KindAcquire, Session: 3, Seq: 4, Name: "stock/sku-42", Owner: "worker-7"}).AppendEncode(nil)
	inside := func(s string) bool {
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		return p >= uintptr(unsafe.Pointer(&b[0])) && p < uintptr(unsafe.Pointer(&b[0]))+uintptr(len(b))
	}
	var v Command
	if err := DecodeCommandView(b, &v); err != nil {
		t.Fatal(err)
	}
	c, err := DecodeCommand(b)
	if err != nil {
		t.Fatal(err)
	}
	if v.Name != "stock/sku-42" || v.Owner != "worker-7" || !inside(v.Name) || !inside(v.Owner) {
		t.Fatalf("view %+v: strings should equal and point into the encoded bytes", v)
	}
	if inside(c.Name) || inside(c.Owner) {
		t.Fatalf("DecodeCommand's strings point into the encoded bytes")
	}
}

// A name taken and released between two commits, with no record in the file, costs the file nothing: the
// next batch neither writes nor deletes it. A name the file has a record of is still deleted when it leaves,
// even if it came back and left again within the interval, so a restart finds what memory has (S7).
func TestShortLivedNamesCostTheFileNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fresh.db")
	f := mustOpen(t, path, Options{NoSync: true})
	index := uint64(0)
	apply := func(c Command) {
		index++
		if r, _ := f.ApplyCommand(index, &c, nil); r.Err != nil {
			t.Fatalf("index %d %v %s: %v", index, c.Kind, c.Name, r.Err)
		}
	}
	seq := uint64(0)
	take := func(name string) {
		seq++
		apply(Command{Kind: KindAcquire, Session: 1, Seq: seq, Name: name, Owner: "o"})
	}
	drop := func(name string) {
		seq++
		apply(Command{Kind: KindRelease, Session: 1, Seq: seq, Name: name, Owner: "o"})
	}
	batchNames := func(b *CommitBatch) []string {
		var names []string
		for _, x := range b.locks {
			names = append(names, string(x.k))
		}
		return names
	}
	apply(Command{Kind: KindOpenSession, Node: 1, TTLMillis: 5000})
	take("kept")
	take("x")
	take("t0")
	drop("t0") // came and went before the first commit
	b := f.PrepareCommit()
	if got := batchNames(b); !slices.Equal(got, []string{"kept", "x"}) {
		t.Fatalf("first batch writes %q, want [kept x]", got)
	}
	if err := f.WriteCommit(b); err != nil {
		t.Fatal(err)
	}
	drop("x") // in the file: its record must go
	take("x") // back within the interval...
	drop("x") // ...and gone again
	take("t")
	drop("t") // never in the file
	b = f.PrepareCommit()
	if got := batchNames(b); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("second batch writes %q, want [x] (x's record deleted, t not in it)", got)
	}
	if err := f.WriteCommit(b); err != nil {
		t.Fatal(err)
	}
	want := snapshotBytes(t, f)
	_ = f.Close()
	g := mustOpen(t, path, Options{NoSync: true})
	if _, held := g.Lock("x"); held {
		t.Fatal("x, released, is in the table read back from the file")
	}
	if !bytes.Equal(want, snapshotBytes(t, g)) {
		t.Fatal("the table read back from the file differs from memory's")
	}
}

// Reset keeps a decoded command's name list for the next decode and holds nothing of the entry: a loop that
// decodes every entry into one Command allocates no list per multi-name entry and pins no entry's bytes.
func TestCommandResetKeepsRoomAndDropsTheEntry(t *testing.T) {
	b := (&Command{Kind: KindAcquire, Session: 3, Seq: 4, Name: "a", Owner: "o", ExtraNames: []string{"b", "c"}}).AppendEncode(nil)
	var c Command
	if err := DecodeCommandView(b, &c); err != nil {
		t.Fatal(err)
	}
	list := c.ExtraNames[:cap(c.ExtraNames)]
	c.Reset()
	if c.Name != "" || c.Owner != "" || len(c.ExtraNames) != 0 || cap(c.ExtraNames) != len(list) {
		t.Fatalf("after Reset: %+v (list cap %d, want %d)", c, cap(c.ExtraNames), len(list))
	}
	for i, s := range list {
		if s != "" {
			t.Fatalf("after Reset the list still holds %q at %d (the entry's bytes)", s, i)
		}
	}
	single := (&Command{Kind: KindAcquire, Session: 3, Seq: 5, Name: "d", Owner: "o"}).AppendEncode(nil)
	if err := DecodeCommandView(single, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.ExtraNames) != 0 || cap(c.ExtraNames) != len(list) {
		t.Fatalf("a single-name entry dropped the list's room: len %d cap %d", len(c.ExtraNames), cap(c.ExtraNames))
	}
}
