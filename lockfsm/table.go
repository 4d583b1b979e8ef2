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
type lockTable struct {
	slots []*lock // nil, or a power of two long
	n     int
}

// tableSeed seeds the names' hashes (see lockTable).
var tableSeed = maphash.MakeSeed()

// minTableSlots is the smallest slice a table with an entry has.
const minTableSlots = 8

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

// home is name's first slot.
func (t *lockTable) home(name string) int {
	return int(maphash.String(tableSeed, name) & uint64(len(t.slots)-1))
}

// find returns the slot of name, or -1.
func (t *lockTable) find(name string) int {
	if t.n == 0 {
		return -1
	}
	mask := len(t.slots) - 1
	for i := t.home(name); ; i = (i + 1) & mask {
		switch l := t.slots[i]; {
		case l == nil:
			return -1
		case l.name == name:
			return i
		}
	}
}

// get returns the entry named name, or nil.
func (t *lockTable) get(name string) *lock {
	if i := t.find(name); i >= 0 {
		return t.slots[i]
	}
	return nil
}

// has reports whether l itself (not only an entry of its name) is in t.
func (t *lockTable) has(l *lock) bool {
	i := t.find(l.name)
	return i >= 0 && t.slots[i] == l
}

// put adds l, replacing the entry of the same name if there is one.
func (t *lockTable) put(l *lock) {
	if i := t.find(l.name); i >= 0 {
		t.slots[i] = l
		return
	}
	if 4*(t.n+1) > 3*len(t.slots) {
		t.resize(slotsFor(t.n + 1))
	}
	t.insert(l)
	t.n++
}

// insert puts l in the first free slot from its home (there is one, and no entry of its name).
func (t *lockTable) insert(l *lock) {
	mask := len(t.slots) - 1
	i := t.home(l.name)
	for t.slots[i] != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = l
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
	i := t.find(name)
	if i < 0 {
		return
	}
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j] != nil; j = (j + 1) & mask {
		// The entry at j may fill the hole at i unless its home lies cyclically in (i, j].
		h := t.home(t.slots[j].name)
		if (i < j && i < h && h <= j) || (j < i && (i < h || h <= j)) {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = nil
	t.n--
	if len(t.slots) > minTableSlots && shrinkBelow*t.n < len(t.slots) {
		t.resize(slotsFor(t.n))
	}
}

// resize moves the entries to a slice of size slots.
func (t *lockTable) resize(size int) {
	old := t.slots
	t.slots = make([]*lock, size)
	for _, l := range old {
		if l != nil {
			t.insert(l)
		}
	}
}

// all yields every entry, in slot order (see lockTable). t must not change meanwhile.
func (t *lockTable) all() iter.Seq[*lock] {
	return func(yield func(*lock) bool) {
		for _, l := range t.slots {
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
