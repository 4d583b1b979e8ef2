package lockfsm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestNameQueueSorted (S7): a run queue hands out exactly the sorted names, whatever their number (across
// several chunks) and order, so every replica ends the same names in the same run; selectSmallest puts the
// k smallest first for every k.
func TestNameQueueSorted(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 7))
	for _, n := range []int{0, 1, 2, 3, 10, 1000, 2*sortChunk + 12345} {
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
	}
	for n := 1; n <= 12; n++ {
		for k := 0; k <= n; k++ {
			for range 20 {
				a := make([]string, n)
				for i, p := range r.Perm(n) {
					a[i] = fmt.Sprintf("%02d", p)
				}
				selectSmallest(a, k)
				first := slices.Clone(a[:k])
				slices.Sort(first)
				for i, x := range first {
					if x != fmt.Sprintf("%02d", i) {
						t.Fatalf("n %d k %d: a[:k] = %v", n, k, a[:k])
					}
				}
			}
		}
	}
}
