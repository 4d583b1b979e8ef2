package lockfsm

import (
	"slices"
	"strings"
)

// Records is the number of records the table holds (sessions and names): what a snapshot of it writes.
// O(1).
func (f *FSM) Records() int { return len(f.sessions) + len(f.locks) }

// LocksPage returns, sorted by name, at most limit names that start with prefix and sort after after ("" for
// the first page), and whether more such names follow. It scans the table once (O(names) plus
// O(matches·log limit)) and copies only the page, so a page of a large table costs one pass, not a sort of
// every name. limit < 1 is taken as 1.
func (f *FSM) LocksPage(prefix, after string, limit int) (page []LockInfo, more bool) {
	limit = max(limit, 1)
	// top holds the limit+1 smallest qualifying names seen so far, sorted; the extra one says "more".
	top := make([]string, 0, min(limit+1, len(f.locks)))
	for name := range f.locks {
		if !strings.HasPrefix(name, prefix) || name <= after {
			continue
		}
		if len(top) == limit+1 && name >= top[limit] {
			continue
		}
		i, _ := slices.BinarySearch(top, name)
		if len(top) == limit+1 {
			top = top[:limit]
		}
		top = slices.Insert(top, i, name)
	}
	if len(top) > limit {
		more = true
		top = top[:limit]
	}
	page = make([]LockInfo, 0, len(top))
	for _, name := range top {
		page = append(page, f.locks[name].info())
	}
	return page, more
}
