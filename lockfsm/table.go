package lockfsm

import (
	"hash/maphash"
	"iter"
	"math/bits"
	"slices"
)

// lockTable is a set of lock entries keyed by their names: the lock table (FSM.locks) and a session's
// index of the names it holds (session.holds). Open addressing with linear probing over one slice of
// entry pointers, 8 bytes a slot at most three quarters full: a million held locks cost 16 MiB here,
// where a Go map from name to entry took 56 MiB (a 16-byte key and the pointer a slot, 8 control bytes a
// group of eight, at about half full after it doubled) and a session's index, a map keyed by the entry,
// 38 MiB. Unlike a Go map it shrinks again when most of its names leave.
//
// Names hash with a seed made once per process, so an attacker choosing names cannot aim them at one
// chain. The order of all (the slots' order) therefore differs between processes, as a Go map's does:
// nothing that must be deterministic may depend on it (every such pass sorts the names first).
//
// Growing moves the entries to a slice twice as large a few at a time, not within one insert: a table of
// 786,432 names rehashed them all in one Lock's apply, on every replica at once (258–297 ms here, with
// one session holding them all, whose index grew in the same entry; 163–193 ms at 393,216). While it moves, the old slice
// stays a table of its own: its entries leave it a whole cluster (a run of entries between free slots)
// at a time, or by del's moving back, so every lookup in it still meets its entry before a free slot.
// Lookups try the new slice, then the old. A table that stops changing while it moves keeps both slices
// until its next change.
type lockTable struct {
	slots []*lock // nil, or a power of two long
	n     int     // entries, in slots and old

	// old is the slice the table grew from while its entries move to slots (moveClusters); nil when
	// none is left. Its entries are the oldN ones not moved yet; next is the slot where the next cluster
	// to move begins, and left how many of old's slots are not visited yet.
	old              []*lock
	oldN, next, left int
}

// tableSeed seeds the names' hashes (see lockTable).
var tableSeed = maphash.MakeSeed()

// minTableSlots is the smallest slice a table with an entry has.
const minTableSlots = 8

// moveBudget is how many of the old slice's slots a change visits while a table grows (more when a
// cluster is longer: a cluster moves whole). A table of up to moveBudget slots grows within one insert.
const moveBudget = 128

// newLockTable returns a table with room for n entries without growing.
func newLockTable(n int) *lockTable {
	t := &lockTable{}
	t.reserve(n)
	return t
}

// slotsFor is the slice length that holds n entries at most half full.
func slotsFor(n int) int {
	if n <= minTableSlots/2 {
		return minTableSlots
	}
	return 1 << bits.Len(uint(2*n-1))
}

func (t *lockTable) len() int { return t.n }

// home is name's first slot in a slice of size slots (a power of two).
func home(slots int, name string) int {
	return int(maphash.String(tableSeed, name) & uint64(slots-1))
}

// findIn returns the slot of name in slots, or -1.
func findIn(slots []*lock, name string) int {
	if i, found := probeIn(slots, name); found {
		return i
	}
	return -1
}

// locate returns the slice holding name and its slot there, or nil and -1.
func (t *lockTable) locate(name string) ([]*lock, int) {
	if t.n == 0 {
		return nil, -1
	}
	if i := findIn(t.slots, name); i >= 0 {
		return t.slots, i
	}
	if t.old != nil {
		if i := findIn(t.old, name); i >= 0 {
			return t.old, i
		}
	}
	return nil, -1
}

// get returns the entry named name, or nil.
func (t *lockTable) get(name string) *lock {
	if s, i := t.locate(name); i >= 0 {
		return s[i]
	}
	return nil
}

// has reports whether l itself (not only an entry of its name) is in t.
func (t *lockTable) has(l *lock) bool {
	s, i := t.locate(l.name)
	return i >= 0 && s[i] == l
}

// put adds l, replacing the entry of the same name if there is one.
func (t *lockTable) put(l *lock) {
	if t.old != nil {
		if i := findIn(t.old, l.name); i >= 0 {
			t.old[i] = l
			return
		}
		t.moveClusters(moveBudget)
	}
	// One walk from the name's home finds its entry or the free slot a new one takes (a new name used
	// to be looked for, then placed by a second walk: at a million names each walk is a cache miss or
	// more, and filling a table while a snapshot is read did little else).
	i, found := probeIn(t.slots, l.name)
	if found {
		t.slots[i] = l
		return
	}
	if 4*(t.n+1) > 3*len(t.slots) {
		t.grow(slotsFor(t.n + 1))
		insertIn(t.slots, l)
	} else {
		t.slots[i] = l
	}
	t.n++
}

// probeIn returns the slot of name in slots and true, or the free slot where its walk ended and false
// (-1 for no slots).
func probeIn(slots []*lock, name string) (int, bool) {
	if len(slots) == 0 {
		return -1, false
	}
	mask := len(slots) - 1
	for i := home(len(slots), name); ; i = (i + 1) & mask {
		switch l := slots[i]; {
		case l == nil:
			return i, false
		case l.name == name:
			return i, true
		}
	}
}

// insertIn puts l in the first free slot from its home (there is one, and no entry of its name).
func insertIn(slots []*lock, l *lock) {
	mask := len(slots) - 1
	i := home(len(slots), l.name)
	for slots[i] != nil {
		i = (i + 1) & mask
	}
	slots[i] = l
}

// shrinkBelow: a table less than 1/shrinkBelow full shrinks to at most half full. The rehash is done
// within one delete, so it is kept small: a session ending with a million names rehashed 262,144 of them
// in one run at an eighth (48 ms), 65,536 at a thirty-second; what is left of the table's slots meanwhile
// is 8 bytes a slot, 16 MiB at most for a table that held a million.
const shrinkBelow = 32

// del removes the entry named name, if there is one. The entries after it in its run move back so that
// no lookup meets a hole before its entry (no tombstones); a table left less than 1/shrinkBelow full
// shrinks, to no fewer than minTableSlots (a session taking and releasing one name allocates nothing).
func (t *lockTable) del(name string) {
	s, i := t.locate(name)
	if i < 0 {
		return
	}
	delIn(s, i)
	t.n--
	if t.old != nil && &s[0] == &t.old[0] {
		t.oldN--
	}
	t.moveClusters(moveBudget)
	if len(t.slots) > minTableSlots && shrinkBelow*t.n < len(t.slots) {
		t.moveClusters(len(t.old))
		t.rehash(slotsFor(t.n))
	}
}

// delIn empties slot i of slots, moving back the entries after it in its run.
func delIn(slots []*lock, i int) {
	mask := len(slots) - 1
	for j := (i + 1) & mask; slots[j] != nil; j = (j + 1) & mask {
		// The entry at j may fill the hole at i unless its home lies cyclically in (i, j].
		h := home(len(slots), slots[j].name)
		if (i < j && i < h && h <= j) || (j < i && (i < h || h <= j)) {
			continue
		}
		slots[i] = slots[j]
		i = j
	}
	slots[i] = nil
}

// grow starts moving the entries to a slice of size slots, a few clusters with each later change (a
// move still under way is finished first).
func (t *lockTable) grow(size int) {
	t.moveClusters(len(t.old))
	old := t.slots
	t.slots = make([]*lock, size)
	if t.n == 0 {
		return
	}
	// Begin after a free slot (there is one: a table is at most three quarters full), so that no
	// cluster is cut where the visit begins.
	free := slices.Index(old, nil)
	t.old, t.oldN = old, t.n
	t.next, t.left = (free+1)&(len(old)-1), len(old)-1
	t.moveClusters(moveBudget)
}

// moveClusters moves clusters from the old slice to slots until it has visited at least budget of its
// slots (a cluster moves whole) or none is left.
func (t *lockTable) moveClusters(budget int) {
	if t.old == nil {
		return
	}
	old, mask := t.old, len(t.old)-1
	i := t.next
	for budget > 0 && t.left > 0 && t.oldN > 0 {
		for t.left > 0 && old[i] != nil {
			insertIn(t.slots, old[i])
			old[i] = nil
			t.oldN--
			i = (i + 1) & mask
			t.left--
			budget--
		}
		if t.left > 0 { // old[i] is free
			i = (i + 1) & mask
			t.left--
			budget--
		}
	}
	t.next = i
	if t.left == 0 || t.oldN == 0 {
		t.old, t.oldN, t.next, t.left = nil, 0, 0, 0
	}
}

// rehash moves every entry to a slice of size slots at once (no move may be under way).
func (t *lockTable) rehash(size int) {
	old := t.slots
	t.slots = make([]*lock, size)
	for _, l := range old {
		if l != nil {
			insertIn(t.slots, l)
		}
	}
}

// all yields every entry, in slot order (see lockTable), those not moved yet after the rest. t must not
// change meanwhile.
func (t *lockTable) all() iter.Seq[*lock] {
	return func(yield func(*lock) bool) {
		for _, l := range t.slots {
			if l != nil && !yield(l) {
				return
			}
		}
		for _, l := range t.old {
			if l != nil && !yield(l) {
				return
			}
		}
	}
}

// names returns dst with every name in t, in slot order (see lockTable).
func (t *lockTable) names(dst []string) []string {
	dst = dst[:0]
	for l := range t.all() {
		dst = append(dst, l.name)
	}
	return dst
}

// sortedNames returns dst with every name in t, sorted.
func (t *lockTable) sortedNames(dst []string) []string {
	dst = t.names(dst)
	slices.Sort(dst)
	return dst
}

// reserve makes room for n entries in an empty table, so that filling it does not grow it.
func (t *lockTable) reserve(n int) {
	if t.n == 0 && n > 0 {
		t.slots = make([]*lock, slotsFor(n))
	}
}
