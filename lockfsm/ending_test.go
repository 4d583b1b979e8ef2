package lockfsm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestNameQueueSorted (S7): a run queue hands out exactly the sorted names, whatever their number and
// order, so every replica ends the same names in the same run.
func TestNameQueueSorted(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 7))
	for _, n := range []int{0, 1, 2, 3, 10, smallSegment, smallSegment + 1, 1000, 150_000} {
		m := map[string]struct{}{}
		for len(m) < n {
			m[fmt.Sprintf("n/%d", r.IntN(10*n+10))] = struct{}{}
		}
		q := unsortedQueue(m)
		var got []string
		for {
			name, ok := q.next()
			if !ok {
				break
			}
			got = append(got, name)
		}
		want := sortedKeys(nil, m)
		if !slices.Equal(got, want) {
			t.Fatalf("%d names: the queue's order differs from the sorted names", n)
		}
		// Names already in order, or in reverse, are no worse a case for the median of three.
		for _, names := range [][]string{slices.Clone(want), reversed(want)} {
			q := nameQueue{a: names}
			for i := range want {
				if name, _ := q.next(); name != want[i] {
					t.Fatalf("%d names given in order or reversed: name %d is %q, want %q", n, i, name, want[i])
				}
			}
		}
	}
}

func reversed(a []string) []string {
	b := slices.Clone(a)
	slices.Reverse(b)
	return b
}

// TestNameQueueSpreadsItsWork: after the first name, which needs a pass over them all, no name handed out
// costs more than a bounded number of steps, whatever is left: a run of a session's end costs about the
// same at a million names left as at a thousand. And the sorting stays ahead: the steps in all stay within
// a quicksort's.
func TestNameQueueSpreadsItsWork(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 11))
	const n = 300_000
	names := make([]string, n)
	for i, p := range r.Perm(n) {
		names[i] = fmt.Sprintf("scale/%d", p)
	}
	q := nameQueue{a: names}
	q.next()
	first := q.work
	if first > 3*n {
		t.Fatalf("the first name took %d steps over %d names, want at most %d (a partition down to it)", first, n, 3*n)
	}
	// A run's worth of names (DefaultSessionEndRun) at a time: the most any run took.
	worst, last := 0, q.work
	for i := 1; i < n; i++ {
		if _, ok := q.next(); !ok {
			t.Fatalf("the queue ran out after %d of %d names", i, n)
		}
		if i%DefaultSessionEndRun == 0 || i == n-1 {
			worst = max(worst, q.work-last)
			last = q.work
		}
	}
	if _, ok := q.next(); ok {
		t.Fatal("the queue handed out more names than it was given")
	}
	runBound := (lookahead + 2*smallSegment) * DefaultSessionEndRun
	t.Logf("%d names: first name %d steps, the costliest run %d steps (bound %d), %d in all (%.1f a name)",
		n, first, worst, runBound, q.work, float64(q.work)/n)
	if worst > runBound {
		t.Fatalf("a run took %d steps, want at most %d: the sorting fell behind the runs", worst, runBound)
	}
	if q.work > 3*n*19 {
		t.Fatalf("%d steps in all for %d names, more than a quicksort's", q.work, n)
	}
}
