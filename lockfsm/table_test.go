package lockfsm

import (
	"fmt"
	"math/rand/v2"
	"testing"
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
			if tab.len() != len(want) {
				t.Fatalf("step %d: len %d, want %d", step, tab.len(), len(want))
			}
			for i := range names {
				k := fmt.Sprintf("n%d", i)
				if got := tab.get(k); got != want[k] || (got != nil && !tab.has(got)) {
					t.Fatalf("step %d: get(%s) = %p, want %p", step, k, got, want[k])
				}
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
