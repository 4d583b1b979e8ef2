package lockfsm

import (
	"errors"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// Records is the number of records the table holds (sessions and names): what a snapshot of it writes.
// O(1).
func (f *FSM) Records() int { return len(f.sessions) + f.locks.len() }

// LocksPage returns, sorted by name, at most limit names that start with prefix and sort after after ("" for
// the first page), and whether more such names follow. limit < 1 is taken as 1. The page is the table's
// present state, but it does not pass over the table: the file keeps the names in order, so the page walks
// them from after (O(log names + limit)), merged with the names changed since the file was written (the
// dirty set and the batches prepared and not yet written: O(changed), which commits keep small), each
// looked up in memory. A table without a file, or one whose file is being replaced by a restore, is
// scanned instead (O(names)).
func (f *FSM) LocksPage(prefix, after string, limit int) (page []LockInfo, more bool) {
	limit = max(limit, 1)
	if f.db == nil || f.restoring() {
		return f.scanPage(prefix, after, limit)
	}
	match := func(name string) bool { return name > after && strings.HasPrefix(name, prefix) }
	// changed: the names whose record in the file may not be their state in memory, sorted.
	changed := make([]string, 0, len(f.dirtyLocks))
	for name := range f.dirtyLocks {
		if match(name) {
			changed = append(changed, name)
		}
	}
	durable := f.durable.Load()
	f.unwritten = slices.DeleteFunc(f.unwritten, func(b *CommitBatch) bool { return b.applied <= durable })
	for _, b := range f.unwritten {
		for _, x := range b.locks {
			if name := string(x.k); match(name) {
				changed = append(changed, name)
			}
		}
	}
	slices.Sort(changed)
	changed = slices.Compact(changed)

	var names []string
	take := func(name string) bool {
		if f.locks.get(name) != nil {
			names = append(names, name)
		}
		return len(names) > limit
	}
	err := f.db.View(func(tx *bolt.Tx) error {
		if f.restoring() {
			return errRestoring // the file may already hold the snapshot's table, not memory's
		}
		c := tx.Bucket(bucketLocks).Cursor()
		start := max(prefix, after+"\x00")
		k, _ := c.Seek([]byte(start))
		for {
			inFile := k != nil && strings.HasPrefix(string(k), prefix)
			if !inFile && len(changed) == 0 {
				return nil
			}
			var name string
			switch {
			case !inFile || (len(changed) > 0 && changed[0] < string(k)):
				name, changed = changed[0], changed[1:]
			case len(changed) > 0 && changed[0] == string(k):
				name, changed = changed[0], changed[1:]
				k, _ = c.Next()
			default:
				name = string(k)
				k, _ = c.Next()
			}
			if take(name) {
				return nil
			}
		}
	})
	if err != nil {
		return f.scanPage(prefix, after, limit)
	}
	return f.page(names, limit)
}

// page is the LockInfo of names, sorted, of which at most limit+1 are given: the extra one says more
// follow.
func (f *FSM) page(names []string, limit int) (page []LockInfo, more bool) {
	if len(names) > limit {
		more = true
		names = names[:limit]
	}
	page = make([]LockInfo, 0, len(names))
	for _, name := range names {
		page = append(page, f.locks.get(name).info())
	}
	return page, more
}

var errRestoring = errors.New("lockfsm: a restore is replacing the file")

// scanPage is LocksPage by one pass over the table: O(names) plus O(matches·log limit), copying only the
// page.
func (f *FSM) scanPage(prefix, after string, limit int) (page []LockInfo, more bool) {
	// top holds the limit+1 smallest qualifying names seen so far, sorted; the extra one says "more".
	top := make([]string, 0, min(limit+1, f.locks.len()))
	for l := range f.locks.all() {
		name := l.name
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
	return f.page(top, limit)
}
