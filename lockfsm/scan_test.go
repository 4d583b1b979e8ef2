package lockfsm

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// tableWith opens an FSM holding n names "p<k%prefixes>/name-<k>" (one
// session holds them all) plus a queue of 3 waiters on the first name.
func tableWith(tb testing.TB, n, prefixes int) (*FSM, []string) {
	f, err := Open(filepath.Join(tb.TempDir(), "scan.db"), Options{})
	require.NoError(tb, err)
	tb.Cleanup(func() { f.Close() })
	idx := uint64(0)
	for s := uint64(1); s <= 4; s++ {
		idx++
		f.ApplyCommand(idx, &Command{Kind: KindOpenSession, Node: s, TTLMillis: 5000}, nil)
	}
	var names []string
	for k := range n {
		name := fmt.Sprintf("p%d/name-%d", k%prefixes, k)
		names = append(names, name)
		idx++
		res, _ := f.ApplyCommand(idx, &Command{Kind: KindAcquire, Session: 1, Seq: uint64(k + 1), Name: name, Owner: "o"}, nil)
		require.Equal(tb, Granted, res.Status)
	}
	for s := uint64(2); s <= 4; s++ {
		idx++
		res, _ := f.ApplyCommand(idx, &Command{Kind: KindAcquire, Session: s, Seq: 1, Name: names[0], Owner: "w", Wait: true}, nil)
		require.Equal(tb, Queued, res.Status)
	}
	require.NoError(tb, f.commit()) // as the node commits each batch it applies
	slices.Sort(names)
	return f, names
}

// TestLocksPage (inspection; S7: reads only): paging by prefix with every
// limit walks the names in order, each exactly once, and Stats counts the
// table.
func TestLocksPage(t *testing.T) {
	f, names := tableWith(t, 500, 3)
	for _, limit := range []int{1, 2, 7, 100, 1000} {
		for _, prefix := range []string{"", "p1/", "p2/name-1", "nope/"} {
			var want, got []string
			for _, n := range names {
				if strings.HasPrefix(n, prefix) {
					want = append(want, n)
				}
			}
			after := ""
			for {
				page, more := f.LocksPage(prefix, after, limit)
				require.LessOrEqual(t, len(page), limit)
				for _, li := range page {
					got = append(got, li.Name)
				}
				if !more {
					break
				}
				require.NotEmpty(t, page)
				after = page[len(page)-1].Name
			}
			require.Equal(t, want, got, "prefix %q limit %d", prefix, limit)
		}
	}
	st := f.Stats()
	require.Equal(t, TableStats{Names: 500, Held: 500, Waiters: 3, LongestQueue: 3, Sessions: 4}, st)
	// Randomised: any after value resumes right after it.
	r := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		after := names[r.IntN(len(names))]
		page, _ := f.LocksPage("", after, 5)
		i, _ := slices.BinarySearch(names, after)
		require.Equal(t, names[i+1:min(i+6, len(names))], func() (s []string) {
			for _, li := range page {
				s = append(s, li.Name)
			}
			return
		}())
	}
}

// BenchmarkScan: the cost of a metrics scrape's Stats (kept as the table
// changes) and of one inspection page (along the file's sorted names) over
// a table of 100,000 names (ns per op; cpu-ns/name divides by the names:
// neither passes over them).
func BenchmarkScan(b *testing.B) {
	f, _ := tableWith(b, 100_000, 10)
	// CPU time as well as wall time: on a shared machine the wall time
	// includes waiting for a core.
	cpu := func() int64 {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return ru.Utime.Nano() + ru.Stime.Nano()
	}
	run := func(b *testing.B, f func()) {
		c0 := cpu()
		for range b.N {
			f()
		}
		b.ReportMetric(float64(cpu()-c0)/float64(b.N)/100_000, "cpu-ns/name")
	}
	b.Run("Stats", func(b *testing.B) { run(b, func() { f.Stats() }) })
	b.Run("LocksPage100", func(b *testing.B) { run(b, func() { f.LocksPage("p3/", "", 100) }) })
}
