package lease

import (
	"container/heap"
	"time"
)

// timerQueue orders the leases' and lock-delays' deadlines by when each next
// needs a look: its time, or, once its expiry is proposed, RetryInterval
// later. A table of leased locks can hold hundreds of thousands of them, and
// the leader looks every fine tick (10 ms) while one is near: a pass over
// all of them each time cost the loop a millisecond per 10,000
// (BenchmarkTickLeases). With the queue a tick costs the deadlines that are
// due.
//
// The queue is lazy: changing a deadline's time pushes a new entry and
// makes its earlier ones stale (the deadline's gen moves on); a stale entry
// is dropped when it comes up. Sessions are few (one or two per member) and
// keep their scan.
type timerQueue []timerEntry

type timerEntry struct {
	at  time.Time
	d   *deadline
	gen uint32
}

func (q timerQueue) Len() int           { return len(q) }
func (q timerQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q timerQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *timerQueue) Push(x any)        { *q = append(*q, x.(timerEntry)) }
func (q *timerQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = timerEntry{}
	*q = old[:len(old)-1]
	return e
}

// schedule makes at the time d next needs a look, in place of any earlier.
func (q *timerQueue) schedule(d *deadline, at time.Time) {
	d.gen++
	heap.Push(q, timerEntry{at: at, d: d, gen: d.gen})
}

// forget drops d: its entries are stale from now on.
func forget(d *deadline) { d.gen++ }

// next returns the earliest current entry without removing it, dropping the
// stale entries before it; ok is false when there is none.
func (q *timerQueue) next() (e timerEntry, ok bool) {
	for len(*q) > 0 {
		e = (*q)[0]
		if e.gen == e.d.gen {
			return e, true
		}
		heap.Pop(q)
	}
	return timerEntry{}, false
}

// popDue removes and returns the current entries whose time is not after
// now, earliest first.
func (q *timerQueue) popDue(now time.Time, out []*deadline) []*deadline {
	for {
		e, ok := q.next()
		if !ok || e.at.After(now) {
			return out
		}
		heap.Pop(q)
		out = append(out, e.d)
	}
}
