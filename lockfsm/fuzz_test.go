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
)

// genCommands turns arbitrary bytes into a bounded command stream over few sessions, names and owners,
// with retries (reused sequence numbers), cancels of past and future seqs, expiries and delays. The index
// of the i-th command is i+1.
func genCommands(data []byte) []Command {
	names := []string{"a", "b", "c"}
	owners := []string{"o1", "o2"}
	var cmds []Command
	var sessions []uint64 // opened session ids (maybe closed since)
	seqs := map[uint64]uint64{}
	var tokens []uint64 // grant tokens seen by index (approximation: any past index)
	for i := 0; i+1 < len(data) && len(cmds) < 400; i += 2 {
		op, p := data[i]%10, data[i+1]
		index := uint64(len(cmds) + 1)
		c := Command{}
		pick := func() uint64 {
			if len(sessions) == 0 {
				return 1
			}
			return sessions[int(p>>4)%len(sessions)]
		}
		seqCmd := func(k Kind) {
			c.Kind, c.Session = k, pick()
			seqs[c.Session]++
			c.Seq = seqs[c.Session]
			if p&1 != 0 && c.Seq > 2 { // a retry of an earlier seq
				c.Seq -= uint64(p>>1)%3 + 1
			}
			if p&0x40 != 0 && c.Seq > 4 {
				c.AckedBelow = c.Seq - 3
			}
			c.Name = names[int(p>>2)%len(names)]
			c.Owner = owners[int(p>>3)%len(owners)]
		}
		switch op {
		case 0:
			c = Command{Kind: KindOpenSession, Node: uint64(p % 3), TTLMillis: 1000}
			if len(sessions) < 4 {
				sessions = append(sessions, index)
			} else {
				c.Kind = KindNoop
			}
		case 1, 2, 3:
			seqCmd(KindAcquire)
			c.Wait = op != 3
			c.MaxHolds = uint32(p%3 + 1)
			c.LeaseMillis = uint64(p%2) * 100
		case 4, 5:
			seqCmd(KindRelease)
		case 6:
			seqCmd(KindCancel)
			c.Target = seqs[c.Session] - uint64(p%4)
			if p%5 == 0 {
				c.Target = seqs[c.Session] + 1 // not applied yet: tombstone
			}
			if p&0x80 != 0 {
				// The node knew the target's outcome (say Queued) and acknowledged it: its result is gone.
				c.AckedBelow = c.Target + 1
			}
		case 7:
			c = Command{Kind: KindCloseSession, Session: pick()}
			if p&1 != 0 {
				c.Kind, c.LockDelayMillis = KindExpireSession, uint64(p&2)*50
			}
		case 8:
			c = Command{Kind: KindExpireLease, Name: names[int(p)%len(names)]}
			if len(tokens) > 0 {
				c.Token = tokens[int(p>>2)%len(tokens)]
			}
		case 9:
			if p&0x80 != 0 {
				// A leader's session checkpoint: one or two marks, live or silent (changes no lock).
				c = Command{Kind: KindCheckpoint, Token: uint64(p % 5), Seq: uint64(p % 7),
					Checkpoints: []Checkpoint{{Session: pick(), Live: p&1 != 0, SilenceMillis: uint64(p&1^1) * uint64(p)}}}
				if p&2 != 0 {
					c.Checkpoints = append(c.Checkpoints, Checkpoint{Session: pick() + uint64(p&4), Live: true})
				}
				break
			}
			c = Command{Kind: KindLiftDelay, Name: names[int(p)%len(names)]}
			if len(tokens) > 0 {
				c.Token = tokens[int(p>>2)%len(tokens)]
			}
		}
		tokens = append(tokens, index)
		cmds = append(cmds, c)
	}
	return cmds
}

// checker is the test's own model of the invariants; it sees every result and event.
type checker struct {
	ended     map[uint64]bool
	lastToken map[string]uint64
	queues    map[string][]WaiterInfo // enqueue order, from Queued results
	// creator is, per held name, the acquire that created the current hold (from its Granted event); its
	// Seq is zeroed once a cancel of it has given back its level.
	creator map[string]Event
}

func newChecker() *checker {
	return &checker{ended: map[uint64]bool{}, lastToken: map[string]uint64{}, queues: map[string][]WaiterInfo{},
		creator: map[string]Event{}}
}

// step checks one applied command: its result and events against the model, then the table.
func (k *checker) step(f *FSM, index uint64, c *Command, r Result, ev []Event) error {
	if r.Status == Queued && !r.Duplicate {
		k.queues[c.Name] = append(k.queues[c.Name], WaiterInfo{Session: c.Session, Owner: c.Owner, Seq: c.Seq,
			Enqueued: index, LeaseMillis: c.LeaseMillis})
	}
	if r.Duplicate && len(ev) > 0 {
		return fmt.Errorf("index %d: duplicate emitted %d events", index, len(ev))
	}
	// S4: a cancel of the acquire that created the current hold gives back a level, whether or not that
	// acquire's result is still retained (it may have been queued, acknowledged and then granted).
	if c.Kind == KindCancel && !r.Duplicate && r.Err == nil && c.Target != 0 {
		if g, ok := k.creator[c.Name]; ok && g.Session == c.Session && g.Owner == c.Owner && g.Seq == c.Target {
			if r.Status != Cancelled {
				return fmt.Errorf("index %d: cancel of seq %d, which created the hold of %s, returned %v",
					index, c.Target, c.Name, r.Status)
			}
			g.Seq = 0
			k.creator[c.Name] = g
		}
	}
	for _, e := range ev {
		switch e.Kind {
		case EventGranted:
			if e.Token <= k.lastToken[e.Name] {
				return fmt.Errorf("index %d: token of %s went from %d to %d", index, e.Name, k.lastToken[e.Name], e.Token)
			}
			k.lastToken[e.Name] = e.Token
			k.creator[e.Name] = e
			if e.FromQueue {
				q := k.queues[e.Name]
				if len(q) == 0 || q[0].Session != e.Session || q[0].Seq != e.Seq || q[0].Owner != e.Owner {
					return fmt.Errorf("index %d: FIFO violated on %s: granted %d/%s seq %d, model head %v",
						index, e.Name, e.Session, e.Owner, e.Seq, q)
				}
				k.queues[e.Name] = q[1:]
			}
			if k.ended[e.Session] {
				return fmt.Errorf("index %d: grant to ended session %d", index, e.Session)
			}
		case EventWaitEnded:
			q := k.queues[e.Name]
			found := false
			for i, w := range q {
				if w.Session == e.Session && w.Seq == e.Seq {
					k.queues[e.Name] = append(q[:i:i], q[i+1:]...)
					found = true
					break
				}
			}
			if !found {
				return fmt.Errorf("index %d: wait ended for unknown waiter %d seq %d", index, e.Session, e.Seq)
			}
		case EventReleased:
			delete(k.creator, e.Name)
		case EventSessionEnded:
			k.ended[e.Session] = true
		}
	}
	return k.checkTable(f)
}

// checkTable checks the lock table itself: one holder per name with a sane count, no hold or waiter of an
// ended session, queues equal to the model's enqueue order.
func (k *checker) checkTable(f *FSM) error {
	seen := map[string]bool{}
	for _, l := range f.Locks() {
		seen[l.Name] = true
		if (l.Holder.Session != 0) != (l.HoldCount > 0) || (l.Holder.Session != 0 && l.Delayed) {
			return fmt.Errorf("lock %s: inconsistent holder %+v count %d delayed %v", l.Name, l.Holder, l.HoldCount, l.Delayed)
		}
		if l.Holder.Session == 0 && !l.Delayed && len(l.Waiters) > 0 {
			return fmt.Errorf("lock %s: free with waiters", l.Name)
		}
		if k.ended[l.Holder.Session] {
			return fmt.Errorf("lock %s: held by ended session %d", l.Name, l.Holder.Session)
		}
		if l.Holder.Session != 0 && l.Token != k.lastToken[l.Name] {
			return fmt.Errorf("lock %s: token %d is not the last grant %d", l.Name, l.Token, k.lastToken[l.Name])
		}
		if g := k.creator[l.Name]; l.Holder.Session != 0 && l.GrantSeq != g.Seq {
			return fmt.Errorf("lock %s: grant seq %d, model %d", l.Name, l.GrantSeq, g.Seq)
		}
		for _, w := range l.Waiters {
			if k.ended[w.Session] {
				return fmt.Errorf("lock %s: waiter of ended session %d", l.Name, w.Session)
			}
		}
		if fmt.Sprint(l.Waiters) != fmt.Sprint(k.queues[l.Name]) && !(len(l.Waiters) == 0 && len(k.queues[l.Name]) == 0) {
			return fmt.Errorf("lock %s: queue %v, model %v", l.Name, l.Waiters, k.queues[l.Name])
		}
	}
	for name, q := range k.queues {
		if len(q) > 0 && !seen[name] {
			return fmt.Errorf("lock %s: model has waiters %v, table has none", name, q)
		}
	}
	return nil
}

func snapshotBytes(t testing.TB, f *FSM) []byte {
	var b bytes.Buffer
	if err := f.WriteSnapshot(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// memFSM is an FSM without a file, for tests that only Apply and WriteSnapshot (neither touches bbolt).
func memFSM() *FSM {
	sessions, locks := newState()
	return &FSM{path: "(memory)", sessions: sessions, locks: locks, dirtySessions: make(map[uint64]struct{}),
		dirtyLocks: make(map[string]struct{})}
}

// fuzzRestoreTarget is one bbolt-backed FSM per fuzz process, reused by every FuzzApply input: Restore
// replaces all of its state, and creating a bbolt file per input (an fdatasync even with NoSync, plus a
// temporary directory) made fuzzing crawl.
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

func openTemp(t testing.TB, name string) *FSM {
	f, err := Open(filepath.Join(t.TempDir(), name), Options{NoSync: true}) // test files only
	if err != nil {
		t.Fatal(err)
	}
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

func FuzzApply(f *testing.F) {
	f.Add([]byte{0, 0, 0, 16, 1, 0, 1, 16, 4, 0, 4, 16})
	f.Add([]byte{0, 0, 0, 16, 0, 32, 1, 0, 2, 16, 2, 32, 7, 1, 7, 0, 4, 16, 6, 0x10, 9, 4, 8, 4})
	f.Add([]byte{0, 0, 0, 1, 1, 8, 2, 24, 2, 4, 3, 0, 6, 5, 7, 3, 9, 8, 9, 12, 1, 1, 1, 0x41, 5, 0x43, 8, 0})
	// Queued, handed off by a release, then cancelled with its result acknowledged away (S4).
	f.Add([]byte{0, 0, 0, 0, 1, 0x00, 1, 0x30, 4, 0x00, 6, 0xB5})
	r := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		b := make([]byte, 200)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// Decoding garbage never panics, and what decodes re-encodes to something that decodes the same.
		if c, err := DecodeCommand(data); err == nil {
			c2, err := DecodeCommand(c.AppendEncode(nil))
			if err != nil || fmt.Sprint(c) != fmt.Sprint(c2) {
				t.Fatalf("re-decode: %v %+v %+v", err, c, c2)
			}
		} else if !errors.Is(err, ErrBadCommand) {
			t.Fatalf("decode error %v does not wrap ErrBadCommand", err)
		}
		cmds := genCommands(data)
		a := memFSM()
		entries, err := runStream(t, a, cmds)
		if err != nil {
			t.Fatal(err)
		}
		full := snapshotBytes(t, a)
		// Same stream, second replica: byte-identical.
		b := memFSM()
		for i, e := range entries {
			b.Apply(uint64(i+1), e, nil)
		}
		if !bytes.Equal(full, snapshotBytes(t, b)) {
			t.Fatal("two replicas of the same stream differ")
		}
		// Snapshot at k, restore into a fresh FSM, replay the rest: identical to the full replay.
		kk := len(entries) / 2
		c := memFSM()
		for i, e := range entries[:kk] {
			c.Apply(uint64(i+1), e, nil)
		}
		d := restoreTarget(t)
		if err := d.Restore(bytes.NewReader(snapshotBytes(t, c))); err != nil {
			t.Fatal(err)
		}
		for i, e := range entries[kk:] {
			d.Apply(uint64(kk+i+1), e, nil)
		}
		if !bytes.Equal(full, snapshotBytes(t, d)) {
			t.Fatalf("snapshot at %d + replay differs from full replay", kk)
		}
	})
}

// TestCheckerCatchesPlantedBugs shows the invariant checker is not vacuous: a planted FIFO bug (grant the
// queue's tail) and a planted phantom waiter are both reported.
func TestCheckerCatchesPlantedBugs(t *testing.T) {
	stream := []Command{
		{Kind: KindOpenSession}, {Kind: KindOpenSession},
		{Kind: KindAcquire, Session: 1, Seq: 1, Name: "a", Owner: "h"},
		{Kind: KindAcquire, Session: 2, Seq: 1, Name: "a", Owner: "w1", Wait: true},
		{Kind: KindAcquire, Session: 2, Seq: 2, Name: "a", Owner: "w2", Wait: true},
		{Kind: KindRelease, Session: 1, Seq: 2, Name: "a", Owner: "h"},
	}
	if _, err := runStream(t, openTemp(t, "ok.db"), stream); err != nil {
		t.Fatalf("correct FSM reported: %v", err)
	}
	testHookGrantTail = true
	_, err := runStream(t, openTemp(t, "bug.db"), stream)
	testHookGrantTail = false
	if err == nil || !strings.Contains(err.Error(), "FIFO") {
		t.Fatalf("planted FIFO bug not caught: %v", err)
	}

	f := openTemp(t, "phantom.db")
	k := newChecker()
	stream = stream[:5]
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
