package lockfsm

// nameQueue hands out a set of distinct names in sorted order, sorting as it goes: an incremental
// quicksort whose work is spread over the names it hands out, so that no single run of a session's end
// pays for ordering what is left.
//
// Ordering the names once (a sort) took 0.7 s at a million, in the first run's entry; selecting the
// smallest 65,536 of what was left, every sixteenth run, took 40–65 ms an entry against about 10 for a
// run's own work. Here only the first name costs passes over every name (partitions down to it, about
// two passes in all); every later name pays for at most lookahead steps of sorting beyond its own, and the
// sorting stays ahead of the runs, so a run's cost no longer depends on how many names are left
// (TestNameQueueSpreadsItsWork: at a million, a run of 512 names takes at most about 16,800 steps).
//
// The order handed out is the sorted order whatever the work done, so every replica (or a restart, or a
// version with another budget) hands out the same names in the same order from the same set.
type nameQueue struct {
	// a holds the names. a[:h] were handed out (and cleared, for the collector); a[h:r] are sorted and
	// ready; a[r:] is split into segments, each sorting entirely before the next, whose ends are ends
	// (the first segment's end last).
	a    []string
	h, r int
	ends []int
	// part is the partition of the first segment in progress, if on.
	part partition
	// work counts the steps taken (a name visited by a partition or a small sort), for tests.
	work int
}

// partition is a Lomuto partition of a[lo:hi] around pivot, held at a[hi-1]: a[lo:p] sort before pivot,
// a[p:i] after it, a[i:hi-1] not yet visited.
type partition struct {
	on           bool
	lo, hi, i, p int
	pivot        string
}

const (
	// lookahead is how many steps of sorting a queue takes with each name it hands out, beyond what that
	// name needs. This quicksort takes about 17 steps a name at 300,000 names and 19 at a million, so the
	// sorted part stays ahead of the runs, as long as no segment is much larger than the ones before it
	// (see startPartition).
	lookahead = 32
	// smallSegment is the largest segment sorted by insertion.
	smallSegment = 16
	// sampleAbove is the smallest segment whose pivot is the median of pivotSample names.
	sampleAbove = 1 << 10
	pivotSample = 31
)

// sortedQueue hands out names, which are sorted.
func sortedQueue(names []string) nameQueue {
	return nameQueue{a: names, r: len(names)}
}

func unsortedQueue[V any](m map[string]V) nameQueue {
	q := nameQueue{a: make([]string, 0, len(m))}
	for k := range m {
		q.a = append(q.a, k)
	}
	return q
}

// next returns the smallest name left, and false when none is.
func (q *nameQueue) next() (string, bool) {
	if q.h == len(q.a) {
		return "", false
	}
	q.sort(lookahead)
	name := q.a[q.h]
	q.a[q.h] = ""
	q.h++
	return name, true
}

// sort sorts until a name is ready, then budget steps further (or until every name is sorted).
func (q *nameQueue) sort(budget int) {
	for q.r < len(q.a) && (budget > 0 || q.r == q.h) {
		end := len(q.a)
		if len(q.ends) > 0 {
			end = q.ends[len(q.ends)-1]
		}
		if !q.part.on && end-q.r <= smallSegment {
			insertionSort(q.a[q.r:end])
			n := end - q.r
			q.work += n
			budget -= n
			q.r = end
			if len(q.ends) > 0 {
				q.ends = q.ends[:len(q.ends)-1]
			}
			continue
		}
		if !q.part.on {
			q.part = startPartition(q.a, q.r, end)
			if end-q.r > sampleAbove {
				q.work += pivotSample
			}
		}
		steps := budget
		if q.r == q.h {
			steps = end // a name is needed now: finish the partition
		}
		budget -= q.partitionSteps(steps)
	}
}

// startPartition starts partitioning a[lo:hi] (more than smallSegment names) around a median: of
// pivotSample names spread over it when it is large, else of its first, middle and last names. The pivot
// is moved to a[hi-1]. A median of many splits near the middle nearly always: the sorting stays ahead of
// the runs only while no segment is much larger than the ones before it.
func startPartition(a []string, lo, hi int) partition {
	last := hi - 1
	if hi-lo > sampleAbove {
		var idx [pivotSample]int
		stride := (hi - lo) / pivotSample
		for k := range idx {
			idx[k] = lo + k*stride
			for j := k; j > 0 && a[idx[j]] < a[idx[j-1]]; j-- {
				idx[j], idx[j-1] = idx[j-1], idx[j]
			}
		}
		m := idx[pivotSample/2]
		a[m], a[last] = a[last], a[m]
		return partition{on: true, lo: lo, hi: hi, i: lo, p: lo, pivot: a[last]}
	}
	mid := lo + (hi-lo)/2
	if a[mid] < a[lo] {
		a[mid], a[lo] = a[lo], a[mid]
	}
	if a[last] < a[lo] {
		a[last], a[lo] = a[lo], a[last]
	}
	if a[last] < a[mid] {
		a[last], a[mid] = a[mid], a[last]
	}
	a[mid], a[last] = a[last], a[mid]
	return partition{on: true, lo: lo, hi: hi, i: lo, p: lo, pivot: a[last]}
}

// partitionSteps visits up to n names of the partition in progress and returns how many it visited. When
// the partition completes, the first segment becomes three: the names before the pivot, the pivot, the
// names after it.
func (q *nameQueue) partitionSteps(n int) int {
	pt, a := &q.part, q.a
	stop := min(pt.i+n, pt.hi-1)
	visited := stop - pt.i
	for i := pt.i; i < stop; i++ {
		if a[i] < pt.pivot {
			a[i], a[pt.p] = a[pt.p], a[i]
			pt.p++
		}
	}
	pt.i = stop
	q.work += visited
	if pt.i == pt.hi-1 {
		a[pt.p], a[pt.hi-1] = a[pt.hi-1], a[pt.p]
		// [lo, p) then [p, p+1) then [p+1, hi): hi is already the first segment's end.
		if pt.p+1 < pt.hi {
			q.ends = append(q.ends, pt.p+1)
		}
		if pt.p > pt.lo {
			q.ends = append(q.ends, pt.p)
		}
		*pt = partition{}
	}
	return visited
}

func insertionSort(a []string) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}
