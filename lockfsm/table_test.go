package lockfsm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"
)

// The lock table answers as a Go map of the same entries does, through growth, deletions that wrap
// around the end of the slots, and shrinking; lookups never meet a hole before their entry.
func TestLockTableIsAMap(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		r := rand.New(rand.NewPCG(seed, 42))
		t.Logf("seed %d", seed)
		tab, want := newLockTable(0), map[string]*lock{}
		names := r.IntN(200) + 20 // few names: many collisions, runs that wrap
		shrinks, slots := 0, 0
		for step := range 50_000 {
			name := fmt.Sprintf("n%d", r.IntN(names))
			switch op := r.IntN(10); {
			case op < 5:
				l := &lock{name: name}
				tab.put(l)
				want[name] = l
			case op < 9:
				tab.del(name)
				delete(want, name)
			default: // most names leave: the table shrinks
				for k := range want {
					if r.IntN(8) != 0 {
						tab.del(k)
						delete(want, k)
					}
				}
			}
			for i := range names {
				k := fmt.Sprintf("n%d", i)
				if got := tab.get(k); got != want[k] || (got != nil && !tab.has(got)) {
					t.Fatalf("step %d: get(%s) = %p, want %p", step, k, got, want[k])
				}
			}
			checkHoldsTheMap(t, step, tab, want)
			if n := len(tab.slots); n != 0 && (4*tab.len() > 3*n || (n > minTableSlots && shrinkBelow*tab.len() < n)) {
				t.Fatalf("step %d: %d entries in %d slots", step, tab.len(), n)
			}
			if len(tab.slots) < slots {
				shrinks++
			}
			slots = len(tab.slots)
		}
		if shrinks == 0 {
			t.Fatalf("seed %d: the table never shrank", seed)
		}
	}
}

// has is about the entry itself: another entry of the same name is not it.
func TestLockTableHasTheEntry(t *testing.T) {
	tab := newLockTable(1)
	a, b := &lock{name: "x"}, &lock{name: "x"}
	tab.put(a)
	if !tab.has(a) || tab.has(b) {
		t.Fatal("has: want a, not b")
	}
	tab.put(b)
	if tab.has(a) || !tab.has(b) || tab.len() != 1 {
		t.Fatal("put of the same name replaces the entry")
	}
}

// TestLockTableGrowsAFewClustersAtATime: a table that grows moves its entries to the larger slice over
// many changes, never more than moveBudget of the old slice's slots and one cluster in one change, and
// every lookup, delete and replacement meanwhile finds what a map would, whichever slice the entry is in.
func TestLockTableGrowsAFewClustersAtATime(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 5))
	tab, want := newLockTable(0), map[string]*lock{}
	const names = 40_000
	growths, spread, longest := 0, 0, 0
	for step := range 400_000 {
		name := fmt.Sprintf("n%d", r.IntN(names))
		movingBefore, oldBefore := tab.old != nil, tab.oldN
		switch op := r.IntN(10); {
		case op < 6:
			l := &lock{name: name}
			tab.put(l)
			want[name] = l
		case op < 8:
			tab.del(name)
			delete(want, name)
		default:
			if got := tab.get(name); got != want[name] || (got != nil && !tab.has(got)) {
				t.Fatalf("step %d: get(%s) = %p, want %p", step, name, got, want[name])
			}
		}
		if !movingBefore && tab.old != nil {
			growths++
			if len(tab.old) > 4*moveBudget {
				spread++
			}
			longest = longestCluster(tab.old)
		}
		if movingBefore {
			// One change visits moveBudget slots, and finishes the cluster it is in.
			if moved := oldBefore - tab.oldN; moved > moveBudget+longest+1 {
				t.Fatalf("step %d: one change moved %d entries (the longest cluster %d)", step, moved, longest)
			}
		}
		if tab.old != nil && tab.oldN == 0 {
			t.Fatalf("step %d: an empty old slice kept", step)
		}
		if step%5000 == 0 || (tab.old != nil && step%97 == 0) {
			checkHoldsTheMap(t, step, tab, want)
		}
	}
	checkHoldsTheMap(t, -1, tab, want)
	if spread == 0 {
		t.Fatalf("the table grew %d times, never over several changes", growths)
	}
	t.Logf("grew %d times, %d of them over several changes", growths, spread)
}

// longestCluster is the longest run of entries without a free slot in slots, around the end too.
func longestCluster(slots []*lock) int {
	longest, run := 0, 0
	for i := range 2 * len(slots) {
		if slots[i%len(slots)] == nil {
			run = 0
			continue
		}
		run++
		longest = max(longest, min(run, len(slots)))
	}
	return longest
}

// checkHoldsTheMap fails unless tab holds exactly want's entries (its length, and all).
func checkHoldsTheMap(t *testing.T, step int, tab *lockTable, want map[string]*lock) {
	t.Helper()
	if tab.len() != len(want) {
		t.Fatalf("step %d: len %d, want %d", step, tab.len(), len(want))
	}
	seen := 0
	for l := range tab.all() {
		if want[l.name] != l {
			t.Fatalf("step %d: all yields %s, not in the map", step, l.name)
		}
		seen++
	}
	if seen != len(want) {
		t.Fatalf("step %d: all yields %d entries, want %d", step, seen, len(want))
	}
}

// fromEntries returns a table with two sessions open (of nodes 1 and 2), an apply that applies a command
// from its encoded entry at index, and overwrite, which overwrites every entry applied so far: what the
// table keeps must not point into them (S7).
func fromEntries(t *testing.T) (f *FSM, apply func(index uint64, c *Command), overwrite func()) {
	t.Helper()
	f = memFSM()
	f.ApplyCommand(1, &Command{Kind: KindOpenSession, Node: 1, TTLMillis: 5000}, nil)
	f.ApplyCommand(2, &Command{Kind: KindOpenSession, Node: 2, TTLMillis: 5000}, nil)
	var entries [][]byte
	apply = func(index uint64, c *Command) {
		b := c.AppendEncode(nil)
		entries = append(entries, b)
		if r, _ := f.Apply(index, b, nil); r.Err != nil {
			t.Fatalf("index %d: %v", index, r.Err)
		}
	}
	overwrite = func() {
		for _, b := range entries {
			for i := range b {
				b[i] = 0xff
			}
		}
	}
	return f, apply, overwrite
}

// Holds and waiters of one owner share one copy of its bytes (the owners cache), which is not the
// applied entry's: a table of a million locks of a few owners keeps a few owner strings, and overwriting
// an entry once applied changes no owner in the table.
func TestOwnersShareOneCopy(t *testing.T) {
	f, apply, overwrite := fromEntries(t)
	apply(3, &Command{Kind: KindAcquire, Session: 1, Seq: 1, Name: "a", Owner: "worker-7"})
	apply(4, &Command{Kind: KindAcquire, Session: 1, Seq: 2, Name: "b", Owner: "worker-7"})
	apply(5, &Command{Kind: KindAcquire, Session: 2, Seq: 1, Name: "a", Owner: "worker-7", Wait: true})
	overwrite()
	ha, hb := &f.locks.get("a").holds()[0], &f.locks.get("b").holds()[0]
	w := &f.locks.get("a").waiters()[0]
	for _, o := range []string{ha.owner, hb.owner, w.owner} {
		if o != "worker-7" {
			t.Fatalf("owner %q, want worker-7", o)
		}
	}
	if unsafe.StringData(ha.owner) != unsafe.StringData(hb.owner) || unsafe.StringData(w.owner) != unsafe.StringData(ha.owner) {
		t.Fatalf("the holds and the waiter of one owner keep %p, %p and %p, not one copy",
			unsafe.StringData(ha.owner), unsafe.StringData(hb.owner), unsafe.StringData(w.owner))
	}
}

// A LockAll's new names are copied out of the entry together, in one allocation, and an existing name's
// entry lends the hold its own copy (the table's memory per held lock, S7: nothing points into the
// entry's bytes). Checked for a grant and a queued wait, with the entries overwritten after apply.
func TestLockAllNamesAreCopiedTogether(t *testing.T) {
	f, apply, overwrite := fromEntries(t)
	apply(3, &Command{Kind: KindAcquire, Session: 1, Seq: 1, Name: "solo", Owner: "o"})
	apply(4, &Command{Kind: KindAcquire, Session: 1, Seq: 2, Name: "alpha", Owner: "o", ExtraNames: []string{"beta", "gamma"}})
	apply(5, &Command{Kind: KindAcquire, Session: 2, Seq: 1, Name: "delta", Owner: "p", ExtraNames: []string{"solo", "epsilon"},
		Wait: true})
	overwrite()
	held := f.locks.get("alpha").holds()[0].names()
	queued := f.locks.get("delta").waiters()[0].x.names
	if !slices.Equal(held, []string{"alpha", "beta", "gamma"}) || !slices.Equal(queued, []string{"delta", "solo", "epsilon"}) {
		t.Fatalf("names %q and %q after the entries were overwritten", held, queued)
	}
	follows := func(a, b string) bool {
		return unsafe.Pointer(unsafe.StringData(b)) == unsafe.Add(unsafe.Pointer(unsafe.StringData(a)), len(a))
	}
	if !follows(held[0], held[1]) || !follows(held[1], held[2]) {
		t.Fatalf("the grant's new names are not one copy: %p %p %p", unsafe.StringData(held[0]),
			unsafe.StringData(held[1]), unsafe.StringData(held[2]))
	}
	if !follows(queued[0], queued[2]) {
		t.Fatalf("the wait's new names are not one copy: %p %p", unsafe.StringData(queued[0]), unsafe.StringData(queued[2]))
	}
	if l := f.locks.get("solo"); unsafe.StringData(queued[1]) != unsafe.StringData(l.name) {
		t.Fatal("the wait keeps a copy of its name solo besides the table's")
	}
	for _, name := range held {
		if l := f.locks.get(name); unsafe.StringData(l.name) != unsafe.StringData(name) {
			t.Fatalf("lock %s keeps a copy of its name besides its hold's", name)
		}
	}
}
