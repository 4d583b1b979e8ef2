package lockfsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func snapshotBytes(t testing.TB, f *FSM) []byte {
	var b bytes.Buffer
	if err := f.WriteSnapshot(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// memFSM is an FSM without a file, for tests that only Apply and WriteSnapshot (neither touches bbolt).
func memFSM() *FSM { return plantedMemFSM(knobs{}) }

// plantedMemFSM is memFSM with the bugs of k planted.
func plantedMemFSM(k knobs) *FSM {
	sessions, locks := newState()
	return &FSM{path: "(memory)", sessions: sessions, locks: locks, dirtySessions: make(map[uint64]struct{}),
		dirtyLocks: make(map[string]struct{}), k: k}
}

// fuzzRestoreTarget is one bbolt-backed FSM per fuzz process, reused by every FuzzApply input: Restore
// replaces all of its state (each user sets its knobs), and creating a bbolt file per input (an fdatasync
// even with NoSync, plus a temporary directory) made fuzzing crawl.
var fuzzRestoreTarget struct {
	once sync.Once
	f    *FSM
	err  error
}

func restoreTarget(t testing.TB) *FSM {
	r := &fuzzRestoreTarget
	r.once.Do(func() {
		dir, err := os.MkdirTemp("", "lockfsm-fuzz-")
		if err != nil {
			r.err = err
			return
		}
		r.f, r.err = Open(filepath.Join(dir, "restore.db"), Options{NoSync: true})
		// The file is tiny and rewritten by every Restore; unlinking it now (the open descriptor and map
		// stay valid) leaves nothing behind when the fuzz worker exits.
		_ = os.RemoveAll(dir)
	})
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.f
}

// mustOpen opens the state file at path, failing the test if it cannot.
func mustOpen(t testing.TB, path string, opts Options) *FSM {
	t.Helper()
	f, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func openTemp(t testing.TB, name string) *FSM {
	f := mustOpen(t, filepath.Join(t.TempDir(), name), Options{NoSync: true}) // test files only
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// runStream applies cmds (encoded, as raft would carry them) and checks the invariants after every step.
func runStream(t testing.TB, f *FSM, cmds []Command) ([][]byte, error) {
	k := newChecker()
	var entries [][]byte
	var ev []Event
	for i := range cmds {
		data := cmds[i].AppendEncode(nil)
		entries = append(entries, data)
		var r Result
		r, ev = f.Apply(uint64(i+1), data, ev[:0])
		if err := k.step(f, uint64(i+1), &cmds[i], r, ev); err != nil {
			return entries, err
		}
	}
	return entries, nil
}

// checkStream is FuzzApply's body: decoding data never panics and classifies its error; the command stream
// made from data keeps every invariant of the checker at every step (S1, S2, S4, S6, L2, L4); a second
// replica applying the same entries ends with byte-identical snapshots, and so does one restored from a
// snapshot taken half-way that replays the rest (S7). Every state machine involved has the bugs of k planted.
func checkStream(t testing.TB, data []byte, k knobs) error {
	// Decoding garbage never panics, and what decodes re-encodes to something that decodes the same.
	// DecodeCommandView agrees with DecodeCommand, into a command that held another one before.
	view := Command{Name: "stale", ExtraNames: []string{"x", "y"}}
	verr := DecodeCommandView(data, &view)
	if c, err := DecodeCommand(data); (err == nil) != (verr == nil) || (err == nil && fmt.Sprint(c) != fmt.Sprint(view)) {
		return fmt.Errorf("DecodeCommandView %v %+v, DecodeCommand %v %+v", verr, view, err, c)
	}
	if c, err := DecodeCommand(data); err == nil {
		c2, err := DecodeCommand(c.AppendEncode(nil))
		if err != nil || fmt.Sprint(c) != fmt.Sprint(c2) {
			return fmt.Errorf("re-decode: %v %+v %+v", err, c, c2)
		}
	} else if errors.Is(err, errBadCommand) == errors.Is(err, ErrNewerFormat) {
		return fmt.Errorf("decode error %v is not exactly one of ErrBadCommand and ErrNewerFormat", err)
	}
	_, entries, err := genApply(data, plantedMemFSM(k), newChecker())
	if err != nil {
		return err
	}
	return checkReplicas(t, entries, k)
}

// checkReplicas applies entries to one replica, to a second one, and to a third restored from a snapshot
// of the first half then replaying the rest: all three end with byte-identical snapshots (S7). Every
// replica has the bugs of k planted.
func checkReplicas(t testing.TB, entries [][]byte, k knobs) error {
	a := plantedMemFSM(k)
	for i, e := range entries {
		a.Apply(uint64(i+1), e, nil)
	}
	full := snapshotBytes(t, a)
	// Same stream, second replica: byte-identical.
	b := plantedMemFSM(k)
	for i, e := range entries {
		b.Apply(uint64(i+1), e, nil)
	}
	if !bytes.Equal(full, snapshotBytes(t, b)) {
		return errors.New("S7: two replicas of the same stream differ")
	}
	// A replica applying each entry from a buffer that is overwritten once it is applied, both through
	// Apply and through DecodeCommandView and ApplyCommand (as a node applies): identical too, so the
	// state keeps no string that points into an entry.
	for _, view := range []bool{false, true} {
		e := plantedMemFSM(k)
		for i, ent := range entries {
			buf := bytes.Clone(ent)
			if view {
				var c Command
				if DecodeCommandView(buf, &c) == nil {
					e.ApplyCommand(uint64(i+1), &c, nil)
				} else {
					e.Apply(uint64(i+1), buf, nil)
				}
			} else {
				e.Apply(uint64(i+1), buf, nil)
			}
			for j := range buf {
				buf[j] = '#'
			}
		}
		if got, err := snapshotAfterScribble(t, e); err != nil || !bytes.Equal(full, got) {
			return fmt.Errorf("S7: a replica whose entry buffers were overwritten after apply differs (view %v): %v",
				view, err)
		}
	}
	// Snapshot at kk, restore into another FSM, replay the rest: identical to the full replay.
	kk := len(entries) / 2
	c := plantedMemFSM(k)
	for i, e := range entries[:kk] {
		c.Apply(uint64(i+1), e, nil)
	}
	d := restoreTarget(t)
	d.k = k
	if err := d.Restore(bytes.NewReader(snapshotBytes(t, c))); err != nil {
		return err
	}
	for i, e := range entries[kk:] {
		d.Apply(uint64(kk+i+1), e, nil)
	}
	if !bytes.Equal(full, snapshotBytes(t, d)) {
		return fmt.Errorf("S7: snapshot at %d + replay differs from full replay", kk)
	}
	return nil
}

// snapshotAfterScribble is f's snapshot, or the panic that taking it caused: a table whose keys pointed
// into overwritten entries no longer finds its own locks.
func snapshotAfterScribble(t testing.TB, f *FSM) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("snapshot panicked: %v", r)
		}
	}()
	return snapshotBytes(t, f), nil
}

// fuzzSeeds are hand-made streams (three bytes a command: op, p, q; see gen.next) for each primitive.
var fuzzSeeds = [][]byte{
	// Mutex: open two sessions, acquire, contend, release.
	{0, 0, 0, 0, 16, 0, 1, 0, 0, 1, 0x12, 0, 3, 0, 0, 3, 0x10, 0},
	// Queued, handed off by a release, then cancelled with its result acknowledged away (S4).
	{0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0x10, 4, 3, 0, 0, 11, 0x90, 4},
	// Read-write: readers, a waiting writer, readers behind it, releases, downgrade.
	{0, 0, 0, 0, 16, 0, 5, 0x20, 0, 5, 0x32, 4, 5, 0x02, 8, 5, 0x22, 8, 6, 0x20, 0, 6, 0x30, 4, 5, 0x10, 4},
	// Semaphore: permits 2+1 of 3, a waiter for 3, releases by token, a lease expiry.
	{0, 0, 0, 0, 16, 0, 7, 0x40, 1, 7, 0x20, 4, 7, 0x72, 8, 8, 0x00, 0, 13, 0x00, 2, 8, 0x00, 4},
	// Election: campaigns, proclaim, resign, expiry with delay, lift.
	{0, 0, 0, 0, 16, 0, 9, 0x20, 0, 9, 0x32, 4, 10, 0x20, 0, 10, 0x00, 0, 12, 0x13, 0, 14, 0, 4},
	// Multi-name: {a,b} held, {b,c} waits, single a waits, release, cancel.
	{0, 0, 0, 0, 16, 0, 4, 0x00, 0, 4, 0x12, 1, 1, 0x10, 0, 3, 0x00, 0, 11, 0x10, 1},
	// Version-1 entries, malformed ones, wrong kinds.
	{0, 0, 0, 15, 0, 0x10, 15, 0, 0x20, 15, 0, 0x30, 16, 0, 0, 1, 0x04, 0xc0, 7, 0x08, 0xc0},
}

func FuzzApply(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		b := make([]byte, 300)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := checkStream(t, data, knobs{}); err != nil {
			t.Fatal(err)
		}
	})
}

// plantedBugs are the bugs planted in the state machine (knobs), one per invariant the checker holds it
// to, each with a stream that shows it (hand-made) and the words the report must contain.
var plantedBugs = []struct {
	name   string
	plant  knobs
	stream []Command
	want   string
}{
	{"FIFO: a release grants the queue's tail", knobs{grantTail: true}, []Command{
		{Kind: KindOpenSession}, {Kind: KindOpenSession},
		{Kind: KindAcquire, Session: 1, Seq: 1, Name: "a", Owner: "h"},
		{Kind: KindAcquire, Session: 2, Seq: 1, Name: "a", Owner: "w1", Wait: true},
		{Kind: KindAcquire, Session: 2, Seq: 2, Name: "a", Owner: "w2", Wait: true},
		{Kind: KindRelease, Session: 1, Seq: 2, Name: "a", Owner: "h"},
	}, "FIFO violated"},
	{"S1: a mutex granted while held", knobs{grantWhileHeld: true}, []Command{
		{Kind: KindOpenSession}, {Kind: KindOpenSession},
		{Kind: KindAcquire, Session: 1, Seq: 1, Name: "a", Owner: "h"},
		{Kind: KindAcquire, Session: 2, Seq: 1, Name: "a", Owner: "x"},
	}, "S1: a held exclusively"},
	{"S1: two leaders of an election", knobs{grantWhileHeld: true}, []Command{
		{Kind: KindOpenSession}, {Kind: KindOpenSession},
		{Kind: KindAcquire, Session: 1, Seq: 1, Name: "e", Owner: "h", Primitive: PrimElection},
		{Kind: KindAcquire, Session: 2, Seq: 1, Name: "e", Owner: "x", Primitive: PrimElection},
	}, "S1: e held exclusively"},
	{"S1: a reader granted beside a writer", knobs{readerBesideWriter: true}, []Command{
		{Kind: KindOpenSession}, {Kind: KindOpenSession},
		{Kind: KindAcquire, Session: 1, Seq: 1, Name: "r", Owner: "w", Primitive: PrimRW},
		{Kind: KindAcquire, Session: 2, Seq: 1, Name: "r", Owner: "x", Primitive: PrimRW, Mode: ModeShared},
	}, "beside writer"},
	{"S1: a permit over N", knobs{permitOverN: true}, []Command{
		{Kind: KindOpenSession}, {Kind: KindOpenSession},
		{Kind: KindAcquire, Session: 1, Seq: 1, Name: "s", Owner: "a", Primitive: PrimSemaphore, Limit: 2, Permits: 2},
		{Kind: KindAcquire, Session: 2, Seq: 1, Name: "s", Owner: "b", Primitive: PrimSemaphore, Limit: 2},
	}, "permits in use, limit 2"},
	{"S1: a multi-name grant that takes only some names", knobs{partialMulti: true}, []Command{
		{Kind: KindOpenSession},
		{Kind: KindAcquire, Session: 1, Seq: 1, Name: "a", Owner: "m", ExtraNames: []string{"b"}},
	}, "is missing on b"},
	{"S2: a grant from a queue stamped with its enqueue index", knobs{enqueueToken: true}, []Command{
		{Kind: KindOpenSession}, {Kind: KindOpenSession},
		{Kind: KindAcquire, Session: 1, Seq: 1, Name: "r", Owner: "w", Primitive: PrimRW},
		{Kind: KindAcquire, Session: 2, Seq: 1, Name: "r", Owner: "x", Primitive: PrimRW, Mode: ModeShared, Wait: true},
		{Kind: KindAcquire, Session: 1, Seq: 2, Name: "r", Owner: "w", Primitive: PrimRW, Mode: ModeShared},
		{Kind: KindRelease, Session: 1, Seq: 3, Name: "r", Owner: "w", Primitive: PrimRW},
	}, "S2: token of r went from 5 to 4"},
	{"FIFO: a smaller semaphore request overtakes the head", knobs{semaphoreBarge: true}, []Command{
		{Kind: KindOpenSession}, {Kind: KindOpenSession},
		{Kind: KindAcquire, Session: 1, Seq: 1, Name: "s", Owner: "a", Primitive: PrimSemaphore, Limit: 3},
		{Kind: KindAcquire, Session: 1, Seq: 2, Name: "s", Owner: "a", Primitive: PrimSemaphore, Limit: 3, Permits: 2},
		{Kind: KindAcquire, Session: 2, Seq: 1, Name: "s", Owner: "b", Primitive: PrimSemaphore, Limit: 3, Permits: 3, Wait: true},
		{Kind: KindAcquire, Session: 2, Seq: 2, Name: "s", Owner: "c", Primitive: PrimSemaphore, Limit: 3, Wait: true},
		{Kind: KindRelease, Session: 1, Seq: 3, Name: "s", Owner: "a", Primitive: PrimSemaphore, Token: 3},
	}, "FIFO violated on s"},
	{"L4: a cancelled writer leaves the readers behind it waiting", knobs{noSettleOnCancel: true}, []Command{
		{Kind: KindOpenSession}, {Kind: KindOpenSession},
		{Kind: KindAcquire, Session: 1, Seq: 1, Name: "r", Owner: "a", Primitive: PrimRW, Mode: ModeShared},
		{Kind: KindAcquire, Session: 2, Seq: 1, Name: "r", Owner: "w", Primitive: PrimRW, Wait: true},
		{Kind: KindAcquire, Session: 2, Seq: 2, Name: "r", Owner: "b", Primitive: PrimRW, Mode: ModeShared, Wait: true},
		{Kind: KindCancel, Session: 2, Seq: 3, Name: "r", Owner: "w", Target: 1},
	}, "L4: lock r"},
	{"S7: the table keeps strings that point into applied entries", knobs{keepAliases: true}, []Command{
		{Kind: KindOpenSession},
		{Kind: KindAcquire, Session: 1, Seq: 1, Name: "a", Owner: "h"},
	}, "entry buffers were overwritten"},
	{"S7: snapshots drop waiters' election values", knobs{snapshotNoValue: true}, []Command{
		{Kind: KindOpenSession}, {Kind: KindOpenSession},
		{Kind: KindAcquire, Session: 1, Seq: 1, Name: "e", Owner: "a", Primitive: PrimElection, Value: "va"},
		{Kind: KindAcquire, Session: 2, Seq: 1, Name: "e", Owner: "b", Primitive: PrimElection, Value: "vb", Wait: true},
		{Kind: KindNoop}, {Kind: KindNoop},
		{Kind: KindRelease, Session: 1, Seq: 2, Name: "e", Owner: "a", Primitive: PrimElection},
		{Kind: KindNoop},
	}, "S7: snapshot at 4 + replay differs"},
	{"S4: a queue grants a waiter of an ending session", knobs{grantEnding: true}, []Command{
		{Kind: KindOpenSession}, {Kind: KindOpenSession},
		{Kind: KindAcquire, Session: 2, Seq: 1, Name: "j", Owner: "p"},
		{Kind: KindAcquire, Session: 2, Seq: 2, Name: "k", Owner: "p"},
		{Kind: KindAcquire, Session: 1, Seq: 1, Name: "j", Owner: "o", Wait: true},
		{Kind: KindAcquire, Session: 1, Seq: 2, Name: "k", Owner: "o", Wait: true},
		{Kind: KindCloseSession, Session: 1, Limit: 1}, // ends the wait for j
		{Kind: KindRelease, Session: 2, Seq: 3, Name: "k", Owner: "p"},
	}, "grant to ended or ending session 1"},
	{"S7: a run of a session's end counts names already gone", knobs{runCountsGone: true}, []Command{
		{Kind: KindOpenSession}, {Kind: KindOpenSession},
		{Kind: KindAcquire, Session: 2, Seq: 1, Name: "y", Owner: "p"},
		{Kind: KindAcquire, Session: 1, Seq: 1, Name: "a", Owner: "o"},
		{Kind: KindAcquire, Session: 1, Seq: 2, Name: "b", Owner: "o"},
		{Kind: KindAcquire, Session: 1, Seq: 3, Name: "y", Owner: "o", ExtraNames: []string{"z"}, Wait: true},
		{Kind: KindCloseSession, Session: 1, Limit: 1}, // ends y+z's wait: z is gone from the session's waits
		// The replica restored from the snapshot after it rebuilds its run queue without z.
		{Kind: KindNoop}, {Kind: KindNoop}, {Kind: KindNoop}, {Kind: KindNoop}, {Kind: KindNoop},
		{Kind: KindEndSessionRun, Session: 1, Limit: 1},
		{Kind: KindEndSessionRun, Session: 1, Limit: 1},
	}, "S7: snapshot at 7 + replay differs"},
}

// TestCheckerCatchesPlantedBugs shows that every invariant of the checker can fail (S1, S2, S4, S7, L2,
// L4): each planted bug's stream passes on the correct state machine and is reported, with the expected
// words, with the bug planted. A phantom waiter (a session ended in the model but still queued in the
// table) is reported too.
func TestCheckerCatchesPlantedBugs(t *testing.T) {
	check := func(stream []Command, k knobs) error {
		entries, err := runStream(t, plantedMemFSM(k), stream)
		if err != nil {
			return err
		}
		return checkReplicas(t, entries, k)
	}
	for _, b := range plantedBugs {
		t.Run(b.name, func(t *testing.T) {
			if err := check(b.stream, knobs{}); err != nil {
				t.Fatalf("correct FSM reported: %v", err)
			}
			err := check(b.stream, b.plant)
			if err == nil || !strings.Contains(err.Error(), b.want) {
				t.Fatalf("planted bug not caught: %v (want %q)", err, b.want)
			}
			t.Logf("caught: %v", err)
		})
	}

	f := openTemp(t, "phantom.db")
	k := newChecker()
	stream := plantedBugs[0].stream[:5]
	for i := range stream {
		r, ev := f.ApplyCommand(uint64(i+1), &stream[i], nil)
		if err := k.step(f, uint64(i+1), &stream[i], r, ev); err != nil {
			t.Fatal(err)
		}
	}
	// Plant a phantom: session 2 ends in the model, but its waiters stay in the table.
	k.ended[2] = true
	if err := k.checkTable(f); err == nil || !strings.Contains(err.Error(), "ended session") {
		t.Fatalf("phantom waiter not caught: %v", err)
	}
}

// TestFuzzFindsPlantedBugs shows the fuzz body finds each planted bug from random bytes alone (not only
// from a stream made for it): it tries random streams until one is reported, and fails if none of 3000
// is. The seed of the stream that caught it is logged.
func TestFuzzFindsPlantedBugs(t *testing.T) {
	if testing.Short() {
		t.Skip("searches random streams")
	}
	base := uint64(time.Now().UnixNano())
	t.Logf("base seed %d", base)
	seen := map[knobs]bool{}
	for _, b := range plantedBugs {
		if seen[b.plant] {
			continue // one search per bug
		}
		seen[b.plant] = true
		t.Run(b.name, func(t *testing.T) {
			for i := range uint64(3000) {
				r := rand.New(rand.NewPCG(base+i, 11))
				data := make([]byte, 1200)
				for j := range data {
					data[j] = byte(r.IntN(256))
				}
				if err := checkStream(t, data, b.plant); err != nil {
					t.Logf("caught by stream %d (seed %d, 11): %v", i+1, base+i, err)
					return
				}
			}
			t.Fatal("3000 random streams did not catch it")
		})
	}
}
