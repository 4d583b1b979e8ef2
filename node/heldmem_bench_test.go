package node

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkHeldLocksHeap is what held locks cost the heap of a three-member
// cluster in one process: the three replicas' lock tables and, on the member
// the callers use, each lock's handle. 64 callers on one member take
// NODE_BENCH_HELD distinct names (20,000 unless set) and keep the handles;
// the heap after a collection, less the heap before, over the names.
//
//	go test -run '^$' -bench HeldLocksHeap -benchtime 1x ./node/
func BenchmarkHeldLocksHeap(b *testing.B) {
	held := 20000
	if v, err := strconv.Atoi(os.Getenv("NODE_BENCH_HELD")); err == nil && v > 0 {
		held = v
	}
	var perLock float64
	for range b.N {
		b.StopTimer()
		nodes := benchCluster(b, logEngineWAL)
		n := nodes[1]
		ctx := context.Background()
		h, err := n.Acquire(ctx, "warm", "o", true, 0) // the session is open before the count starts
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			b.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		handles := make([]*Hold, held)
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(held); i = next.Add(1) - 1 {
					h, err := n.Acquire(ctx, fmt.Sprintf("held/%d", i), "o", true, 0)
					if err != nil {
						b.Error(err)
						return
					}
					handles[i] = h
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		perLock += (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(held)
		runtime.KeepAlive(handles)
		b.StartTimer()
	}
	b.ReportMetric(perLock/float64(b.N), "heap_B/held")
}
