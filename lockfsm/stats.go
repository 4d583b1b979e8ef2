package lockfsm

// TableStats summarises the lock table for metrics.
type TableStats struct {
	Names        int // names in the table (held, waited for or delayed)
	Held         int // names with a holder
	Waiters      int // queued acquires over all names
	LongestQueue int // the most waiters any one name has
	Delayed      int // names in their lock-delay
	Sessions     int // open sessions
}

// Stats counts the table in O(names changed since the last call or commit), not O(names): the counts
// are kept as the table changes (tableCounts), so metrics and status read a table of a million names
// without holding up the loop that owns it.
func (f *FSM) Stats() TableStats {
	f.settleCounts()
	c := &f.counts
	return TableStats{Names: f.locks.len(), Sessions: len(f.sessions), Held: c.held, Waiters: c.waiters,
		LongestQueue: int(c.longest), Delayed: c.delayed}
}

// tableCounts are the sums behind Stats. Each lock records what it last added (lock.counted*); a lock
// whose state changed is recounted from the dirty set (every change marks its name dirty, as commit
// needs) before the set is cleared and whenever Stats reads, and a lock leaving the table is recounted
// to nothing as it leaves (touchLock). The sums do not depend on the order names are recounted in.
type tableCounts struct {
	held, delayed, waiters int
	byQueue                map[uint32]int // names by queue length, for lengths above 0
	longest                uint32         // the largest length in byQueue (0 when empty)
}

// recount moves l's share of the counts from what it last added to what its state adds now (nothing
// once it is empty).
func (c *tableCounts) recount(l *lock) {
	held, delayed, waiters := l.held(), l.delayed, uint32(len(l.waiters()))
	if held != (l.counted&countedHeld != 0) {
		c.held += sign(held)
	}
	if delayed != (l.counted&countedDelayed != 0) {
		c.delayed += sign(delayed)
	}
	if waiters != l.countedWaiters {
		c.waiters += int(waiters) - int(l.countedWaiters)
		c.queue(l.countedWaiters, -1)
		c.queue(waiters, +1)
	}
	l.counted, l.countedWaiters = 0, waiters
	if held {
		l.counted |= countedHeld
	}
	if delayed {
		l.counted |= countedDelayed
	}
}

// The bits of lock.counted: what a lock last added to the held and delayed counts.
const (
	countedHeld    = 1 << iota // counted as held
	countedDelayed             // counted as delayed
)

// queue adds d names with a queue of length n.
func (c *tableCounts) queue(n uint32, d int) {
	if n == 0 {
		return
	}
	if c.byQueue == nil {
		c.byQueue = make(map[uint32]int)
	}
	if c.byQueue[n] += d; c.byQueue[n] == 0 {
		delete(c.byQueue, n)
	}
	if d > 0 {
		c.longest = max(c.longest, n)
		return
	}
	// The longest shrank away: the next longest is at most one shorter per waiter it lost, and
	// usually exactly one (a queue's head granted).
	for c.longest > 0 && c.byQueue[c.longest] == 0 {
		c.longest--
	}
}

func sign(b bool) int {
	if b {
		return 1
	}
	return -1
}

// settleCounts recounts every lock changed since the last commit.
func (f *FSM) settleCounts() {
	for name := range f.dirtyLocks {
		if l := f.locks.get(name); l != nil {
			f.counts.recount(l)
		}
	}
}

// countAll counts a table loaded or restored whole.
func (f *FSM) countAll() {
	f.counts = tableCounts{}
	for l := range f.locks.all() {
		l.counted, l.countedWaiters = 0, 0
		f.counts.recount(l)
	}
}
