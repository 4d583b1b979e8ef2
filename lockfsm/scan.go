package lockfsm

import (
	"slices"
	"strings"
)

// TableStats summarises the lock table for metrics.
type TableStats struct {
	Names        int // names in the table (held, waited for or delayed)
	Held         int // names with a holder
	Waiters      int // queued acquires over all names
	LongestQueue int // the most waiters any one name has
	Delayed      int // names in their lock-delay
	Sessions     int // open sessions
}

// Stats counts the table. It reads every name once (O(names), no allocation): callers that serve metrics
// call it at scrape time, not per operation.
func (f *FSM) Stats() TableStats {
	st := TableStats{Names: len(f.locks), Sessions: len(f.sessions)}
	for _, l := range f.locks {
		if l.held() {
			st.Held++
		}
		if l.delayed {
			st.Delayed++
		}
		st.Waiters += len(l.waiters)
		st.LongestQueue = max(st.LongestQueue, len(l.waiters))
	}
	return st
}

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
