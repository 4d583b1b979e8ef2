package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockraft/lockraft/membership"
)

// BenchmarkLeaderCPUPerThousandOps measures what a fleet costs the leader:
// fleets of 3, 10, 30 and 50 instances in this process (3 voters, up to 2
// learners, the rest light members) run one fixed workload, 2,000
// Lock+Unlock pairs (4,000 lock operations) spread evenly over all
// members, each member on its own lock name, all members concurrently.
//
// Leader CPU, two figures:
//   - leader-cpu-ms/1kops: all of the leader instance's CPU. Every goroutine
//     a node starts carries the pprof label lockraft_node=<its id> (Start
//     sets it; gRPC handlers, push senders, gossip and the loop inherit
//     it), and a CPU profile over the workload is summed by label. Sampled
//     at 100 Hz, so a few percent of noise. Not included: the calling
//     goroutines of the leader's own share of the workload (1/size of it).
//   - leader-loop-cpu-ms/1kops: the leader's raft loop alone, every node
//     loop being pinned to its own OS thread (pinLoopThread) and
//     read from the kernel (/proc/self/task/TID/schedstat): the serial
//     bottleneck, exact.
//
// The process CPU per 1,000 ops (every instance together) is reported for
// reference.
//
// Run with: go test ./node/ -run '^$' -bench LeaderCPUPerThousandOps -benchtime 1x
// (FLEET_BENCH_LOG=1 keeps the nodes' logs; FLEET_BENCH_PROFILE_DIR=dir
// writes each fleet's CPU profile there, for
// go tool pprof -tagfocus=lockraft_node=<leader id>).
func BenchmarkLeaderCPUPerThousandOps(b *testing.B) {
	for _, size := range []int{3, 10, 30, 50} {
		b.Run(fmt.Sprintf("members=%d", size), func(b *testing.B) {
			f, _ := lightFleet(b, fmt.Sprintf("bench%d", size), size, func(c *Config) {
				benchFleetTune(c)
				if os.Getenv("FLEET_BENCH_LOG") == "" {
					c.Logger = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
				}
				pinLoopThread(c)
			})
			var nodes []*Node
			for _, n := range f.All() {
				nodes = append(nodes, n)
			}
			lead := fleetLeader(b, f, 10*time.Second)
			const pairs = 2000
			// Warm up: one pair from every member.
			runPairs(b, nodes, len(nodes))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cpu0, ok := loopCPU(lead)
				if !ok {
					b.Skip("loop thread CPU time not available on this platform")
				}
				proc0 := processCPU()
				var prof bytes.Buffer
				profiling := pprof.StartCPUProfile(&prof) == nil
				start := time.Now()
				runPairs(b, nodes, pairs)
				wall := time.Since(start)
				if profiling {
					pprof.StopCPUProfile()
				}
				cpu1, _ := loopCPU(lead)
				proc1 := processCPU()
				if lead.Leader() != lead.ID() {
					b.Fatal("leader changed during the run")
				}
				ops := float64(2 * pairs)
				if profiling {
					byNode, err := cpuByLabel(prof.Bytes(), profileLabel)
					if err != nil {
						b.Fatal(err)
					}
					if dir := os.Getenv("FLEET_BENCH_PROFILE_DIR"); dir != "" {
						// For go tool pprof -tagfocus=lockraft_node=<leader id>.
						file := filepath.Join(dir, fmt.Sprintf("fleet%d-leader%016x.pprof", size, lead.ID()))
						if err := os.WriteFile(file, prof.Bytes(), 0o644); err != nil {
							b.Fatal(err)
						}
					}
					leaderCPU := byNode[fmt.Sprintf("%016x", lead.ID())]
					if leaderCPU == 0 {
						b.Fatalf("no CPU samples labelled with the leader's id: %v", byNode)
					}
					b.ReportMetric(float64(leaderCPU)/float64(time.Millisecond)*1000/ops, "leader-cpu-ms/1kops")
				}
				b.ReportMetric(float64(cpu1-cpu0)/float64(time.Millisecond)*1000/ops, "leader-loop-cpu-ms/1kops")
				b.ReportMetric(float64(proc1-proc0)/float64(time.Millisecond)*1000/ops, "process-cpu-ms/1kops")
				b.ReportMetric(float64(wall)/float64(time.Millisecond), "wall-ms")
			}
		})
	}
}

// benchFleetTune gives the benchmark's fleet the production defaults (ticks,
// election timeout, session TTL, keepalives; memberlist's LAN timing)
// instead of the tests' shortened timers: the figure is what a fleet costs
// the leader as configured in production, and 50 instances with test timers
// on 2 cores spend their CPU on elections and gossip suspicion instead.
func benchFleetTune(c *Config) {
	c.TickInterval, c.ElectionTicks, c.HeartbeatTicks = 0, 0, 0
	c.SessionTTL, c.KeepaliveInterval, c.RetryInterval = 0, 0, 0
	c.Gossip.Timing = membership.LANTiming()
	c.Gossip.Thresholds.StabilizeFor = 500 * time.Millisecond
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
