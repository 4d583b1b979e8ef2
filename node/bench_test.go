package node

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// benchCluster starts 3 nodes with default timings (100 ms ticks), the given
// raft log engine, real files with fsync, gRPC on loopback, logs discarded.
func benchCluster(b *testing.B, engine string) map[uint64]*Node {
	nodes, _ := benchClusterWith(b, func(c *Config) { c.LogEngine = engine })
	return nodes
}

// benchEngines runs fn once per raft log engine, as sub-benchmarks, so one
// command compares them in the same minute.
func benchEngines(b *testing.B, fn func(b *testing.B, engine string)) {
	for _, e := range []string{logEngineWAL, logEngineBbolt} {
		b.Run("log="+e, func(b *testing.B) { fn(b, e) })
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	slices.Sort(d)
	return d[int(float64(len(d)-1)*p)]
}

// BenchmarkSequentialPair: one caller, Lock+Unlock of distinct names, round
// robin over the three nodes (as an embedding service would: callers live
// on every replica). Reports p50/p99 of the pair.
//
//	go test -run '^$' -bench SequentialPair -benchtime 2000x ./node/
func BenchmarkSequentialPair(b *testing.B) { benchEngines(b, benchSequentialPair) }

func benchSequentialPair(b *testing.B, engine string) {
	nodes := benchCluster(b, engine)
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := nodes[uint64(i%3+1)]
		start := time.Now()
		h, err := n.Acquire(ctx, fmt.Sprintf("s1/%d", i), "o", true, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(float64(percentile(lat, 0.50).Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99_ms")
}

// BenchmarkOpByRole: one caller's Acquire and Release latency (p50), on the
// leader and on a follower, WAL log, alternated: where a pair's time goes.
// On a leader every operation is one commit (its fsync in parallel with a
// follower's, on the same disk here, plus one round trip); a follower adds
// the forwarding hop and the commit notice.
//
//	go test -run '^$' -bench OpByRole -benchtime 400x ./node/
func BenchmarkOpByRole(b *testing.B) {
	nodes := benchCluster(b, logEngineWAL)
	lead := nodes[leaderOf(nodes)]
	fol := nodes[pick(nodes, lead.ID())]
	ctx := context.Background()
	lat := map[string][]time.Duration{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, r := range []struct {
			role string
			n    *Node
		}{{"leader", lead}, {"follower", fol}} {
			t0 := time.Now()
			h, err := r.n.Acquire(ctx, fmt.Sprintf("role/%s/%d", r.role, i), "o", true, 0)
			if err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := h.Release(ctx); err != nil {
				b.Fatal(err)
			}
			lat[r.role+"-acquire"] = append(lat[r.role+"-acquire"], t1.Sub(t0))
			lat[r.role+"-release"] = append(lat[r.role+"-release"], time.Since(t1))
		}
	}
	b.StopTimer()
	for k, d := range lat {
		b.ReportMetric(float64(percentile(d, 0.5).Microseconds())/1000, k+"-p50_ms")
	}
}

// BenchmarkParallelPairs64: 64 callers spread over the three nodes, each
// doing Lock+Unlock on its own names. Reports pairs/s.
//
//	go test -run '^$' -bench ParallelPairs64 -benchtime 5s ./node/
func BenchmarkParallelPairs64(b *testing.B) { benchEngines(b, benchParallelPairs64) }

func benchParallelPairs64(b *testing.B, engine string) {
	nodes := benchCluster(b, engine)
	runCallerPairs(b, nodes, 64, func(g int, i int64) (string, string) { return fmt.Sprintf("s2/%d/%d", g, i%16), "o" })
}

// BenchmarkParallelLockAll3: as ParallelPairs64, each pair a LockAll of three
// names (one entry) and its release: the multi-name lock's cost beside a
// single name's (the target: within 1.3× of Lock's).
//
//	go test -run '^$' -bench ParallelLockAll3 -benchtime 20000x ./node/
func BenchmarkParallelLockAll3(b *testing.B) {
	nodes := benchCluster(b, logEngineWAL)
	runCallerAcquires(b, nodes, 64, func(ctx context.Context, n *Node, g int, i int64) (*Hold, error) {
		base := fmt.Sprintf("m/%d/%d", g, i%16)
		return n.AcquireWith(ctx, Request{Name: base + "/a", Owner: "o", Wait: true,
			ExtraNames: []string{base + "/b", base + "/c"}})
	})
}

// runCallerPairs runs b.N Lock+Unlock pairs from callers goroutines spread over
// the nodes (caller g on node g%3+1), each pair on the name and owner
// lockFor(g, i) gives, and reports pairs/s and the process's CPU time per
// pair (user + system of all three nodes and the callers: steadier than
// pairs/s on a shared machine, and what bounds S2 once the cores are busy).
// The timer covers the pairs only.
func runCallerPairs(b *testing.B, nodes map[uint64]*Node, callers int, lockFor func(g int, i int64) (name, owner string)) {
	runCallerAcquires(b, nodes, callers, pairAcquire(lockFor))
}

// runCallerAcquires is runCallerPairs with each pair's acquire made by
// acquire (the hold it returns is released).
func runCallerAcquires(b *testing.B, nodes map[uint64]*Node, callers int, acquire acquireFunc) {
	b.ResetTimer()
	start, cpu0 := time.Now(), processCPU()
	callAcquires(b, context.Background(), callers, int64(b.N), func(g int) *Node { return nodes[uint64(g%3+1)] }, acquire)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
	if cpu0 > 0 {
		b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu_us/pair")
	}
}

// callPairs runs total Lock+Unlock pairs from callers goroutines, caller g
// on node nodeOf(g), each pair on the name and owner lockFor(g, i) gives (i
// counts from 1 over all callers). It returns when all are done; a failed
// call is reported with tb.Error and ends its caller.
func callPairs(tb testing.TB, ctx context.Context, callers int, total int64, nodeOf func(g int) *Node,
	lockFor func(g int, i int64) (name, owner string)) {
	callAcquires(tb, ctx, callers, total, nodeOf, pairAcquire(lockFor))
}

// acquireFunc takes caller g's i-th hold on n.
type acquireFunc func(ctx context.Context, n *Node, g int, i int64) (*Hold, error)

// pairAcquire is the acquire of callPairs: a waiting Lock of the name and
// owner lockFor gives.
func pairAcquire(lockFor func(g int, i int64) (name, owner string)) acquireFunc {
	return func(ctx context.Context, n *Node, g int, i int64) (*Hold, error) {
		name, owner := lockFor(g, i)
		return n.Acquire(ctx, name, owner, true, 0)
	}
}

// callAcquires is callPairs with each pair's acquire made by acquire.
func callAcquires(tb testing.TB, ctx context.Context, callers int, total int64, nodeOf func(g int) *Node,
	acquire acquireFunc) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for g := range callers {
		n := nodeOf(g)
		wg.Go(func() {
			for i := next.Add(1); i <= total; i = next.Add(1) {
				h, err := acquire(ctx, n, g, i)
				if err == nil {
					err = h.Release(ctx)
				}
				if err != nil {
					tb.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// benchClusterWith starts 3 nodes with default timings except tune.
func benchClusterWith(b *testing.B, tune func(*Config)) (map[uint64]*Node, []Member) {
	b.Helper()
	var members []Member
	lns := map[uint64]net.Listener{}
	for id := uint64(1); id <= 3; id++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		lns[id] = ln
		members = append(members, Member{ID: id, Addr: ln.Addr().String()})
	}
	nodes := map[uint64]*Node{}
	for id := uint64(1); id <= 3; id++ {
		cfg := Config{ID: id, DataDir: b.TempDir(), Members: members, Listener: lns[id],
			Logger: slog.New(slog.DiscardHandler)}
		if tune != nil {
			tune(&cfg)
		}
		n, err := Start(cfg)
		if err != nil {
			b.Fatal(err)
		}
		nodes[id] = n
		b.Cleanup(n.Crash) // stop without cleanup: fast, and a no-op after Close or Crash
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for id, n := range nodes {
		h, err := n.Acquire(ctx, fmt.Sprintf("warmup/%d", id), "w", true, 0)
		if err != nil {
			b.Fatal(err)
		}
		h.Release(ctx)
	}
	return nodes, members
}

func leaderOf(nodes map[uint64]*Node) uint64 {
	for _, n := range nodes {
		if l := n.Leader(); l != 0 {
			return l
		}
	}
	return 0
}

func pick(nodes map[uint64]*Node, not ...uint64) uint64 {
	for id := range nodes {
		if !slices.Contains(not, id) {
			return id
		}
	}
	return 0
}

// BenchmarkCrashTakeover: the holder's node crashes (no Close); reports how
// long after the session TTL the waiter on another node is granted, counted
// from the crash (crash_minus_ttl_ms) and from the send time of the holder's
// last acknowledged keepalive (after_last_keepalive_minus_ttl_ms: the
// promise L3 counts from there). TTL 3 s, with 50 ms ticks (elections after
// 0.5–1 s): a 3 s TTL with the default 1 s election timeout is below
// MinSessionTTL.
//
//	go test -run '^$' -bench CrashTakeover -benchtime 5x ./node/
func BenchmarkCrashTakeover(b *testing.B) {
	ttl := 3 * time.Second
	var fromCrash, fromKeepalive []time.Duration
	for i := 0; i < b.N; i++ {
		crash, lastKA, at := benchHandoff(b, func(c *Config) { c.SessionTTL, c.TickInterval = ttl, 50*time.Millisecond },
			(*Node).Crash)
		fromCrash = append(fromCrash, at.Sub(crash)-ttl)
		fromKeepalive = append(fromKeepalive, at.Sub(lastKA)-ttl)
	}
	b.ReportMetric(float64(percentile(fromCrash, 0.5).Microseconds())/1000, "crash_minus_ttl_p50_ms")
	b.ReportMetric(float64(percentile(fromKeepalive, 0.5).Microseconds())/1000, "after_last_keepalive_minus_ttl_p50_ms")
	b.ReportMetric(float64(percentile(fromKeepalive, 1).Microseconds())/1000, "after_last_keepalive_minus_ttl_max_ms")
}

// BenchmarkCloseHandoff: the holder's node closes gracefully; reports the
// time from Close to the waiter's grant on another node.
//
//	go test -run '^$' -bench CloseHandoff -benchtime 5x ./node/
func BenchmarkCloseHandoff(b *testing.B) {
	var lat []time.Duration
	for i := 0; i < b.N; i++ {
		start, _, granted := benchHandoff(b, nil, func(n *Node) { go n.Close(context.Background()) })
		lat = append(lat, granted.Sub(start))
	}
	b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "close_to_grant_p50_ms")
}

// benchHandoff starts a cluster (benchClusterWith), has a follower hold "x"
// while another follower waits for it, then ends the holder's node with end.
// It returns when end was called, the send time of the holder's last
// acknowledged keepalive before that, and when the waiter was granted.
func benchHandoff(b *testing.B, tune func(*Config), end func(*Node)) (ended, lastKA, granted time.Time) {
	nodes, _ := benchClusterWith(b, tune)
	lead := leaderOf(nodes)
	a := pick(nodes, lead)
	w := pick(nodes, lead, a)
	ctx := context.Background()
	if _, err := nodes[a].Acquire(ctx, "x", "a", true, 0); err != nil {
		b.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		if _, err := nodes[w].Acquire(ctx, "x", "w", true, 0); err == nil {
			got <- time.Now()
		}
	}()
	time.Sleep(200 * time.Millisecond) // queued
	ended = time.Now()
	lastKA = nodes[a].lastAcked.Load()
	end(nodes[a])
	return ended, lastKA, <-got
}

// BenchmarkLeaderFailover: the leader crashes; reports the time until a
// Lock on a survivor succeeds, with default timings (100 ms tick, election
// after 1–2 s).
//
//	go test -run '^$' -bench LeaderFailover -benchtime 5x ./node/
func BenchmarkLeaderFailover(b *testing.B) {
	var lat []time.Duration
	for i := 0; i < b.N; i++ {
		nodes, _ := benchClusterWith(b, nil)
		lead := leaderOf(nodes)
		s := pick(nodes, lead)
		start := time.Now()
		nodes[lead].Crash()
		if _, err := nodes[s].Acquire(context.Background(), fmt.Sprintf("after/%d", i), "s", true, 0); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "unavailable_p50_ms")
	b.ReportMetric(float64(percentile(lat, 1).Microseconds())/1000, "unavailable_max_ms")
}

// BenchmarkStages: where one operation's time goes, stage by stage, for
// callers on the leader and on followers — with one caller and with 64 on
// distinct names (S1 and S2 of the bench), and 16 on one name (S3: each its
// own owner; the table then includes the Acquires' time in the queue, and
// the order check below matters). Every node stamps each log entry as it
// passes each stage (knobs.Node.Stages); p50/p90 per step are printed, and per
// node how often the log order of its commands differs from the order their
// callers called and from the order it proposed them.
//
//	go test -run '^$' -bench Stages -benchtime 20000x ./node/
func BenchmarkStages(b *testing.B) {
	for _, v := range []struct {
		callers int
		hot     bool
	}{{1, false}, {64, false}, {16, true}} {
		name := fmt.Sprintf("callers=%d", v.callers)
		if v.hot {
			name += "/one-name"
		}
		b.Run(name, func(b *testing.B) {
			probe := NewStageProbe(4*b.N + 4096)
			nodes, _ := benchClusterWith(b, func(c *Config) { knobsOfConfig(c).Stages = probe })
			runCallerPairs(b, nodes, v.callers, func(g int, i int64) (string, string) {
				if v.hot {
					return "st/hot", fmt.Sprintf("o%d", g)
				}
				return fmt.Sprintf("st/%d/%d", g, i%16), "o"
			})
			if b.N >= 100 { // not the 1-iteration probe run
				fmt.Printf("%s, %d pairs:\n", b.Name(), b.N)
				probe.Report(os.Stdout, leaderOf(nodes))
				probe.OrderReport(os.Stdout)
			}
		})
	}
}
