package main

import "testing"

func TestMetricsOfTakesTheLastResultLine(t *testing.T) {
	out := []byte(`goos: linux
BenchmarkParallelPairs64/log=wal-2         	       1	  65314 ns/op	  79.85 cpu_us/pair	 15310 pairs/s
--- BENCH: BenchmarkParallelPairs64/log=wal-2
    bench_test.go:126: log line 12 34
BenchmarkStages/callers=16-2         	BenchmarkStages/callers=16, 5000 pairs:
BenchmarkParallelPairs64/log=wal-2         	   30000	  65314 ns/op	  79.85 cpu_us/pair	 15310 pairs/s	 6894 B/op	 91 allocs/op
PASS
`)
	m := metricsOf(out)
	want := map[string]float64{"ns/op": 65314, "cpu_us/pair": 79.85, "pairs/s": 15310, "B/op": 6894, "allocs/op": 91}
	if len(m) != len(want) {
		t.Fatalf("got %v, want %v", m, want)
	}
	for k, v := range want {
		if m[k] != v {
			t.Fatalf("%s: got %v, want %v (all: %v)", k, m[k], v, m)
		}
	}
}

func TestMetricsOfAFigureLineOfItsOwn(t *testing.T) {
	out := []byte(`BenchmarkStages/callers=16-2         	BenchmarkStages/callers=16, 5000 pairs:
  total: call → returned                             2543    14159
   20000	     76835 ns/op	     13012 pairs/s
PASS
`)
	m := metricsOf(out)
	if len(m) != 2 || m["ns/op"] != 76835 || m["pairs/s"] != 13012 {
		t.Fatalf("got %v", m)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{7}, 7}} {
		if got := median(c.in); got != c.want {
			t.Fatalf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
