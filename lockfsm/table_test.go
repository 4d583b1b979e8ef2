package lockfsm

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
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
