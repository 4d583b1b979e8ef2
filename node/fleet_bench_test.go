package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkLeaderCPUPerThousandOps measures what a fleet costs the leader:
// fleets of 3, 10, 30 and 50 instances in this process (3 voters, up to 2
// learners, the rest light members) run one fixed workload, 2,000
// Lock+Unlock pairs (4,000 lock operations) spread evenly over all
// members, each member on its own lock name, all members concurrently.
//
// Leader CPU: every node loop is pinned to its own OS thread
// (TestHooks.LockLoopThread) and the leader's cost is that thread's CPU time
// from the kernel (/proc/self/task/TID/schedstat) over the workload: the
// loop is where the leader does all of its raft, apply, expiry and
// confirmation work, and its serial bottleneck. Not included: the gRPC
// server goroutines that decode the members' Calls and the per-member push
// senders (they run in parallel on other threads and cannot be told apart
// from the other 49 instances' work in one process). The process CPU per
// 1,000 ops (every instance together) is reported alongside for reference.
//
// Run with: go test ./node/ -run '^$' -bench LeaderCPUPerThousandOps -benchtime 1x
func BenchmarkLeaderCPUPerThousandOps(b *testing.B) {
	for _, size := range []int{3, 10, 30, 50} {
		b.Run(fmt.Sprintf("members=%d", size), func(b *testing.B) {
			f, _ := lightFleet(b, fmt.Sprintf("bench%d", size), size, func(c *Config) {
				fleetTune(c)
				c.Logger = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
				c.TestHooks.LockLoopThread = true
			})
			nodes := f.running()
			lead := f.leader(10 * time.Second)
			const pairs = 2000
			// Warm up: one pair from every member.
			runPairs(b, nodes, len(nodes))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cpu0, ok := lead.LoopCPU()
				if !ok {
					b.Skip("loop thread CPU time not available on this platform")
				}
				proc0 := processCPU()
				start := time.Now()
				runPairs(b, nodes, pairs)
				wall := time.Since(start)
				cpu1, _ := lead.LoopCPU()
				proc1 := processCPU()
				if lead.Leader() != lead.ID() {
					b.Fatal("leader changed during the run")
				}
				ops := float64(2 * pairs)
				b.ReportMetric(float64(cpu1-cpu0)/float64(time.Millisecond)*1000/ops, "leader-loop-cpu-ms/1kops")
				b.ReportMetric(float64(proc1-proc0)/float64(time.Millisecond)*1000/ops, "process-cpu-ms/1kops")
				b.ReportMetric(float64(wall)/float64(time.Millisecond), "wall-ms")
			}
		})
	}
}

// runPairs runs pairs Lock+Unlock pairs spread over nodes, concurrently.
func runPairs(b *testing.B, nodes []*Node, pairs int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i, n := range nodes {
		share := pairs / len(nodes)
		if i < pairs%len(nodes) {
			share++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("bench-%d", i)
			for k := 0; k < share; k++ {
				h, err := n.Acquire(ctx, name, "o", true, 0)
				if err == nil {
					err = h.Release(ctx)
				}
				if err != nil {
					b.Errorf("member %x: %v", n.ID(), err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
