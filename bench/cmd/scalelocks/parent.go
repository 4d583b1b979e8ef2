package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockraft/lockraft"
	"github.com/lockraft/lockraft/bench/internal/childproc"
)

// plan is the table's shape, from the flags.
type plan struct {
	locks, owners, callers int
	stride                 int // every stride-th name gets waiters (0: none)
	waiters, queued        int // blocked Lock calls, and names with a queue
	sample                 int
}

func (p plan) name(i int) string  { return fmt.Sprintf("scale/%d", i) }
func (p plan) owner(k int) string { return fmt.Sprintf("owner-%d", k%p.owners) }

// queue is how many waiters name i gets: one or two, alternately, on every
// stride-th name.
func (p plan) queue(i int) int {
	if p.stride == 0 || i%p.stride != 0 {
		return 0
	}
	return 1 + (i/p.stride)%2
}

func newPlan() (plan, error) {
	p := plan{locks: *flagLocks, owners: *flagOwners, callers: *flagCallers, sample: *flagSample}
	switch {
	case p.locks < 1:
		return p, errors.New("-locks must be at least 1")
	case p.owners < 3:
		return p, errors.New("-owners must be at least 3 (a waiter's owner differs from the holder's)")
	case p.callers < 1:
		return p, errors.New("-callers must be at least 1")
	case *flagWaiters < 0 || *flagWaiters > 1:
		return p, errors.New("-waiters is a fraction in [0, 1]")
	case *flagPage < 1 || *flagPage > lockraft.MaxPageLimit:
		return p, fmt.Errorf("-page must be in [1, %d]", lockraft.MaxPageLimit)
	case *flagPairs < 1:
		return p, errors.New("-pairs must be at least 1")
	}
	if *flagWaiters > 0 {
		p.stride = max(1, int(math.Round(1 / *flagWaiters)))
	}
	for i := 0; p.stride > 0 && i < p.locks; i += p.stride {
		p.waiters += p.queue(i)
		p.queued++
	}
	if p.sample <= 0 {
		p.sample = max(1, p.locks/10)
	}
	return p, nil
}

func parent(ctx context.Context) error {
	p, err := newPlan()
	if err != nil {
		return err
	}
	// One session holds the table and queues every waiter: the quota must
	// cover them, and the pairs on other names besides.
	quota := max(lockraft.DefaultMaxLocksPerSession, p.locks+p.waiters+p.callers+4**flagPairs+10_000)
	if quota > 1<<24 {
		return fmt.Errorf("-locks %d with %d waiters is beyond the largest per-session quota lockraft accepts (2^24)", p.locks, p.waiters)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	base, err := os.MkdirTemp(*flagBase, "scalelocks-")
	if err != nil {
		return err
	}
	defer func() {
		if *flagKeep {
			fmt.Printf("data directories and logs kept in %s\n", base)
		} else {
			os.RemoveAll(base)
		}
	}()

	fmt.Printf("$ %s\n", strings.Join(append([]string{"scalelocks"}, os.Args[1:]...), " "))
	fmt.Printf("%s, %d CPUs, %s memory, %s; load average %s\n", time.Now().Format(time.RFC3339), runtime.NumCPU(), memTotal(), runtime.Version(), childproc.Loadavg())
	fmt.Printf("table: %d held locks \"scale/<i>\" by %d owners from %d concurrent callers; %d waiters queued on %d names (one or two each)\n",
		p.locks, p.owners, p.callers, p.waiters, p.queued)
	fmt.Printf("cluster: a static list of 5 voters: the replicas r1..r3 (child processes), the load process (4, not measured) and\n")
	fmt.Printf("         r5, started only at step 5 to receive the table (see the doc comment); gRPC on loopback, default timings,\n")
	fmt.Printf("         default log engine, per-session lock quota %d\n", quota)

	t0 := time.Now()
	c, err := form(ctx, self, base, "r", quota)
	if c != nil {
		defer c.stop()
	}
	if err != nil {
		return err
	}
	fmt.Printf("formed and serving in %v; leader %s\n", time.Since(t0).Round(10*time.Millisecond), c.leader().name())
	var ctl *cluster
	if *flagControl {
		// The same cluster again, left empty: step 2 measures it between the
		// measured cluster's pairs, so that what the machine does meanwhile
		// shows in both.
		t0 = time.Now()
		ctl, err = form(ctx, self, base, "c", quota)
		if ctl != nil {
			defer ctl.stop()
		}
		if err != nil {
			return fmt.Errorf("control cluster: %w", err)
		}
		fmt.Printf("control cluster (c1..c3 and its own load member, kept empty, measured in step 2 only) formed in %v; leader %s\n",
			time.Since(t0).Round(10*time.Millisecond), ctl.leader().name())
	}

	r := &run{c: c, ctl: ctl, p: p}
	return r.all(ctx)
}

// run is one measurement, step by step; each step prints its table.
type run struct {
	c *cluster
	p plan

	empty, full   []memReading
	rest0, rest1  []float64       // the replicas' CPU at rest, % of a core: empty, full
	lat0, lat1    []time.Duration // from the load process
	f             *member         // the follower the pairs inside a replica run in
	rlat0, rlat1  []time.Duration // inside that follower: empty, full
	rlat2         []time.Duration // and once the table is released
	ctl           *cluster        // the control cluster (nil: -control=false)
	cf            *member         // its follower the pairs inside a replica run in
	clat0, clat1  []time.Duration // the control's pairs from its load member, beside lat0 and lat1
	crlat0        []time.Duration // and inside its follower, beside rlat0
	crlat1        []time.Duration // and rlat1
	held          int
	restart       serving
	restartWall   time.Duration
	catchUp       time.Duration
	snapServe     serving
	snapRestored  int
	snapBytes     int64
	pagingWorst   time.Duration
	pagingResults []string
}

func (r *run) all(ctx context.Context) error {
	c := r.c
	if err := sleep(ctx, *flagSettle); err != nil {
		return err
	}
	var err error
	if r.empty, err = readMemory(c.reps); err != nil {
		return err
	}
	r.printMemory("1a", "empty cluster, after a settle of "+flagSettle.String(), c.reps, r.empty, nil)
	if r.rest0, err = r.restCPU(ctx, "1a"); err != nil {
		return err
	}

	// Latency on the empty cluster; a few pairs first to warm up.
	r.f = c.followers()[0]
	if r.ctl != nil {
		r.cf = r.ctl.followers()[0]
	}
	if err := r.measurePairs(ctx, "warm", 50, nil); err != nil {
		return err
	}
	if err := r.measurePairs(ctx, "empty", *flagPairs, []*[]time.Duration{&r.lat0, &r.rlat0, &r.clat0, &r.crlat0}); err != nil {
		return fmt.Errorf("pairs on the empty cluster: %w", err)
	}

	handles, err := r.fill(ctx)
	defer func() { _ = handles }() // held to the end
	if err != nil {
		return err
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	if err := r.queueWaiters(ctx, wctx); err != nil {
		return err
	}
	if err := sleep(ctx, *flagSettle); err != nil {
		return err
	}
	if r.full, err = readMemory(c.reps); err != nil {
		return err
	}
	if *flagHeap != "" {
		// readMemory has just forced a GC: the profile's in-use figures are
		// as of that GC.
		code, body := childproc.Get(c.leader().url+"/debug/pprof/heap", time.Minute)
		if code != 200 {
			return fmt.Errorf("leader's heap profile: %d %.200s", code, body)
		}
		if err := os.WriteFile(*flagHeap, []byte(body), 0o644); err != nil {
			return err
		}
	}
	r.printMemory("1b", fmt.Sprintf("table full (%d held, %d waiting), after a settle of %v", r.held, r.p.waiters, *flagSettle), c.reps, r.full, r.empty)
	if r.rest1, err = r.restCPU(ctx, "1b"); err != nil {
		return err
	}

	if err := r.measurePairs(ctx, "full", *flagPairs, []*[]time.Duration{&r.lat1, &r.rlat1, &r.clat1, &r.crlat1}); err != nil {
		return fmt.Errorf("pairs with the table full: %w", err)
	}
	r.printLatency()
	if r.ctl != nil {
		r.ctl.stop() // the later steps run beside nothing but the measured cluster
	}

	for _, step := range []func(context.Context) error{r.paging, r.restartFollower, r.newMember} {
		if c.leader() == nil {
			fmt.Printf("\n(the load process was elected leader meanwhile: leadership handed back to r1)\n")
		}
		if err := c.replicaLeads(ctx); err != nil {
			return err
		}
		if err := step(ctx); err != nil {
			return err
		}
	}
	ms := c.reps
	base := r.empty
	if r.catchUp > 0 {
		// The new member's "empty cluster" is r1's.
		ms, base = append(ms, c.fresh), append(base, r.empty[0])
	}
	final, err := readMemory(ms)
	if err != nil {
		return err
	}
	r.printMemory("1c", fmt.Sprintf("after the restart (4) and the new member (5; its baseline is r1's empty cluster), a settle of %v", *flagSettle), ms, final, base)
	if err := r.release(ctx); err != nil {
		return err
	}
	r.summary()
	return nil
}

// restCPU measures each replica's CPU over -rest while nothing is asked of
// the cluster, as % of a core, and prints it (the leader marked).
func (r *run) restCPU(ctx context.Context, step string) ([]float64, error) {
	reps := r.c.reps
	before := make([]childproc.Stats, len(reps))
	for i, m := range reps {
		s, err := childproc.FetchStats(m.url, false)
		if err != nil {
			return nil, err
		}
		before[i] = s
	}
	t0 := time.Now()
	if err := sleep(ctx, *flagRest); err != nil {
		return nil, err
	}
	el := time.Since(t0)
	pct := make([]float64, len(reps))
	var parts []string
	leader := r.c.leader()
	for i, m := range reps {
		s, err := childproc.FetchStats(m.url, false)
		if err != nil {
			return nil, err
		}
		pct[i] = float64(s.CPUMicros-before[i].CPUMicros) / float64(el.Microseconds()) * 100
		mark := ""
		if m == leader {
			mark = " (leader)"
		}
		parts = append(parts, fmt.Sprintf("%s%s %.2f %%", m.name(), mark, pct[i]))
	}
	fmt.Printf("%s  CPU at rest over %v, %% of a core: %s; load average %s\n", step, el.Round(time.Millisecond),
		strings.Join(parts, ", "), childproc.Loadavg())
	return pct, nil
}

// release closes the load member: its session ends, releasing every lock
// and waiter (over several entries once every replica runs 0.3), while
// pairs run inside a follower. Then the pairs inside the follower again, on a
// table as empty as at the start: the same figure before and after the
// table, to tell the table's effect from the machine's drift.
func (r *run) release(ctx context.Context) error {
	c := r.c
	leader := c.leader()
	fmt.Printf("\n7. the table released: the load process closes its node (its session ends: every lock and waiter); load average %s\n", childproc.Loadavg())
	t0 := time.Now()
	// Meanwhile, pairs inside the follower, in batches, until the table is empty: a replica whose loop an
	// entry holds shows as a long pair, and a member that gave its session up as failed ones.
	var during []time.Duration
	duringErrs, batches := 0, 0
	stopPairs := make(chan struct{})
	pairsDone := make(chan struct{})
	go func() {
		defer close(pairsDone)
		for {
			select {
			case <-stopPairs:
				return
			default:
			}
			ds, err := repPairs(r.f, fmt.Sprintf("other/during-%d-%s", batches, r.f.name()), 20)
			during = append(during, ds...)
			batches++
			if err != nil {
				duringErrs += 20 - len(ds)
			}
		}
	}()
	// Meanwhile, how far the follower's applied index is behind the leader's commit index, every
	// 100 ms: a follower that applies the session's runs more slowly than the leader proposes them
	// queues every later entry, the pairs' among them, behind the ones it has yet to apply.
	// The follower is read first: a status call waits for the member's loop, so reading the leader
	// first would let the follower catch up before it answers. How long the follower took to answer
	// is how long its loop was busy.
	type lagSample struct {
		entries uint64
		answer  time.Duration
	}
	lagDone := make(chan []lagSample)
	go func() {
		var lags []lagSample
		defer func() { lagDone <- lags }()
		for {
			select {
			case <-stopPairs:
				return
			case <-time.After(100 * time.Millisecond):
			}
			t := time.Now()
			fs, err1 := status(r.f)
			answer := time.Since(t)
			ls, err2 := status(leader)
			if err1 == nil && err2 == nil {
				lags = append(lags, lagSample{ls.Commit - min(ls.Commit, fs.Applied), answer})
			}
		}
	}()
	traceDone := make(chan error, 1)
	if *flagTrace != "" {
		// A CPU profile over the same seconds puts CPU samples, with their goroutines' stacks, into
		// the trace: what a long busy stretch of the loop was doing.
		go childproc.Get(r.f.url+"/debug/pprof/profile?seconds=26", time.Minute)
		go func() {
			code, body := childproc.Get(r.f.url+"/debug/pprof/trace?seconds=25", time.Minute)
			if code != 200 {
				traceDone <- fmt.Errorf("follower's trace: %d %.200s", code, body)
				return
			}
			traceDone <- os.WriteFile(*flagTrace, []byte(body), 0o644)
		}()
	} else {
		traceDone <- nil
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err := c.load.Close(cctx)
	cancel()
	closed := time.Since(t0)
	if err != nil {
		// The session still ends: the cluster expires it after its TTL, as the close would have.
		// Measure that instead.
		fmt.Printf("Close returned after %s ms: %v\n", ms(closed), err)
	}
	names := -1
	for time.Since(t0) < 2*time.Minute {
		st, err := status(leader)
		if err != nil {
			return err
		}
		if names = st.LockNames; names == 0 {
			break
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
	emptied := time.Since(t0)
	close(stopPairs)
	<-pairsDone
	lags := <-lagDone
	if err := <-traceDone; err != nil {
		return err
	}
	fmt.Printf("Lock+Unlock inside follower %s while the table was released: %d pairs, %v, %d failed\n", r.f.name(),
		len(during), summarize(during), duringErrs)
	if len(lags) > 0 {
		entries := make([]uint64, len(lags))
		answers := make([]time.Duration, len(lags))
		for i, l := range lags {
			entries[i], answers[i] = l.entries, l.answer
		}
		slices.Sort(entries)
		fmt.Printf("follower %s's applied index behind leader %s's commit meanwhile (%d samples, every 100 ms): p50 %d, p90 %d, max %d entries; its status answered in %v\n",
			r.f.name(), leader.name(), len(lags), entries[len(entries)/2], entries[len(entries)*9/10], entries[len(entries)-1], summarize(answers))
	}
	var err2 error
	if r.rlat2, err2 = repPairs(r.f, "other/released-"+r.f.name(), *flagPairs); err2 != nil {
		return err2
	}
	rs, err := readMemory(c.reps)
	if err != nil {
		return err
	}
	fmt.Printf("Close returned in %s ms; leader %s's table empty (%d names) %s ms after the Close began\n", ms(closed), leader.name(), names, ms(emptied))
	fmt.Printf("Lock+Unlock inside follower %s: empty %v | full %v | released %v\n", r.f.name(), summarize(r.rlat0), summarize(r.rlat1), summarize(r.rlat2))
	var parts []string
	for i, m := range c.reps {
		parts = append(parts, fmt.Sprintf("%s %.1f (empty %.1f, full %.1f)", m.name(), float64(rs[i].gc.RSSKiB)/1024,
			float64(r.empty[i].gc.RSSKiB)/1024, float64(r.full[i].gc.RSSKiB)/1024))
	}
	fmt.Printf("RSS MiB after a forced GC: %s\n", strings.Join(parts, ", "))
	return nil
}

// fill acquires the table: -callers goroutines take the names in order,
// each with its owner, and keep the handles. A row every p.sample locks.
func (r *run) fill(ctx context.Context) ([]*lockraft.Lock, error) {
	c, p := r.c, r.p
	leader := c.leader()
	fmt.Printf("\n3. the table growing (leader %s; GC pauses are those in each row's interval, bucket upper bounds)\n", leader.name())
	fmt.Printf("%10s %8s %9s | %14s %14s %9s %5s %10s %10s | %14s\n", "locks", "t s", "locks/s",
		"ldr heap MiB", "ldr live MiB", "ldr RSS", "GCs", "pause p50", "pause max", "load heap MiB")
	handles := make([]*lockraft.Lock, p.locks)
	var next, done, failed atomic.Int64
	var firstErr atomic.Value
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for range p.callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= p.locks || fctx.Err() != nil {
					return
				}
				opts := []lockraft.LockOption{lockraft.WithOwner(p.owner(i))}
				if *flagLease > 0 {
					opts = append(opts, lockraft.WithLease(*flagLease))
				}
				l, err := c.load.Lock(fctx, p.name(i), opts...)
				if err != nil {
					firstErr.CompareAndSwap(nil, fmt.Errorf("Lock %s: %w", p.name(i), err))
					if failed.Add(1) >= 100 {
						cancel()
					}
					continue
				}
				handles[i] = l
				done.Add(1)
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()

	prev, err := childproc.FetchStats(leader.url, false)
	if err != nil {
		return handles, err
	}
	prevT, prevN := start, int64(0)
	row := func(label string) {
		s, err := childproc.FetchStats(leader.url, false)
		now, n := time.Now(), done.Load()
		if err != nil {
			fmt.Printf("%10s (leader stats: %v)\n", label, err)
			return
		}
		ps := s.GCPauses.Sub(prev.GCPauses)
		self := childproc.ReadStats()
		rate := float64(n-prevN) / now.Sub(prevT).Seconds()
		fmt.Printf("%10s %8.1f %9.0f | %14.1f %14.1f %9.1f %5d %10v %10v | %14.1f\n", label, now.Sub(start).Seconds(), rate,
			mib(s.HeapObjects), mib(s.HeapLive), float64(s.RSSKiB)/1024, s.GCCycles-prev.GCCycles,
			ps.Quantile(0.5).Round(time.Microsecond), ps.Max().Round(time.Microsecond), mib(self.HeapObjects))
		prev, prevT, prevN = s, now, n
	}
	threshold := int64(p.sample)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
loop:
	for {
		select {
		case <-finished:
			break loop
		case <-tick.C:
			if n := done.Load(); n >= threshold && n < int64(p.locks) {
				row(fmt.Sprint(n))
				for threshold <= n {
					threshold += int64(p.sample)
				}
			}
		}
	}
	r.held = int(done.Load())
	row(fmt.Sprint(r.held))
	fmt.Printf("held %d of %d in %v (%.0f locks/s)\n", r.held, p.locks, time.Since(start).Round(10*time.Millisecond),
		float64(r.held)/time.Since(start).Seconds())
	if err := ctx.Err(); err != nil {
		return handles, context.Cause(ctx)
	}
	if e := firstErr.Load(); e != nil {
		return handles, fmt.Errorf("%d Lock calls failed, the first: %w", failed.Load(), e.(error))
	}
	return handles, nil
}

// waiterWave bounds the blocked Lock calls started at once: the next wave
// starts once the leader's table counts the previous one. All of them at
// once (150,000 at a million names) is not what this measures, and the
// load member could forward them in batches above the transport's message
// limit (4 MiB), which drops such a batch.
const waiterWave = 4096

// queueWaiters starts the blocked Lock calls (they wait until wctx ends),
// in waves, and returns once the leader's table counts them all.
func (r *run) queueWaiters(ctx, wctx context.Context) error {
	c, p := r.c, r.p
	if p.waiters == 0 {
		return nil
	}
	var granted, failed atomic.Int64
	var firstErr atomic.Value
	leader := c.leader()
	start := time.Now()
	timeout := 2*time.Minute + time.Duration(p.waiters)*time.Millisecond
	var st lockraft.StatusView
	// settled waits until the leader's table counts n waiters. A status
	// is a pass over the leader's table: at most two a second.
	settled := func(n int) error {
		for {
			if err := sleep(ctx, 500*time.Millisecond); err != nil {
				return err
			}
			var err error
			if st, err = status(leader); err != nil {
				return err
			}
			if e := firstErr.Load(); e != nil {
				return fmt.Errorf("%d waiters failed, the first: %w", failed.Load(), e.(error))
			}
			if st.Waiters >= n {
				return nil
			}
			if time.Since(start) > timeout {
				return fmt.Errorf("only %d of %d waiters queued after %v", st.Waiters, n, timeout)
			}
		}
	}
	started := 0
	for i := 0; i < p.locks; i += p.stride {
		for j := range p.queue(i) {
			go func() {
				l, err := c.load.Lock(wctx, p.name(i), lockraft.WithOwner(p.owner(i+1+j)))
				switch {
				case err == nil:
					granted.Add(1) // the holder lost it: kept, and reported
					_ = l
				case wctx.Err() == nil:
					firstErr.CompareAndSwap(nil, fmt.Errorf("waiter on %s: %w", p.name(i), err))
					failed.Add(1)
				}
			}()
			if started++; started%waiterWave == 0 {
				if err := settled(started); err != nil {
					return err
				}
			}
		}
	}
	if err := settled(p.waiters); err != nil {
		return err
	}
	s, _ := childproc.FetchStats(leader.url, false)
	fmt.Printf("%10s %8.1f %9.0f | %14.1f %14.1f %9.1f   (waiters/s, in waves of %d; %d waiters queued on %d names; longest queue %d; unexpected grants %d)\n",
		"+waiters", time.Since(start).Seconds(), float64(p.waiters)/time.Since(start).Seconds(),
		mib(s.HeapObjects), mib(s.HeapLive), float64(s.RSSKiB)/1024, waiterWave, st.Waiters, p.queued, st.Longest, granted.Load())
	return nil
}

// printMemory prints each replica's figures; with base, also what each
// grew by per held lock.
func (r *run) printMemory(step, title string, ms []*member, rs, base []memReading) {
	fmt.Printf("\n%s. memory, %s; load average %s\n", step, title, childproc.Loadavg())
	fmt.Printf("%-4s %-7s | %9s %9s %9s %11s %11s %6s %10s | %s\n", "", "", "RSS MiB", "anon MiB", "file MiB",
		"heap MiB", "live MiB", "GCs", "goroutines", "data directory")
	for i, m := range ms {
		for _, v := range []struct {
			label string
			s     childproc.Stats
		}{{"as is", rs[i].asIs}, {"GC'd", rs[i].gc}} {
			disk := ""
			if v.label == "GC'd" {
				disk = diskString(rs[i].disk)
			}
			fmt.Printf("%-4s %-7s | %9.1f %9.1f %9.1f %11.1f %11.1f %6d %10d | %s\n", m.name(), v.label,
				float64(v.s.RSSKiB)/1024, float64(v.s.RSSAnonKiB)/1024, float64(v.s.RSSFileKiB)/1024,
				mib(v.s.HeapObjects), mib(v.s.HeapLive), v.s.GCCycles, v.s.Goroutines, disk)
		}
	}
	if base == nil || r.held == 0 {
		return
	}
	n := float64(r.held)
	fmt.Printf("per held lock beyond the empty cluster (%d held; the %d waiters' entries are in the same table), target RSS ≤ 200 B:\n", r.held, r.p.waiters)
	fmt.Printf("%-4s | %11s %11s | %11s %11s %11s | %11s | %s\n", "", "RSS as is", "RSS GC'd", "anon GC'd", "file GC'd", "live heap", "disk", "GC pause max since start")
	for i, m := range ms {
		a, b := rs[i], base[i]
		per := func(x, y int64) string { return fmt.Sprintf("%.0f B", float64(x-y)*1024/n) }
		ps := a.gc.GCPauses
		fmt.Printf("%-4s | %11s %11s | %11s %11s %11s | %11s | %s\n", m.name(),
			per(a.asIs.RSSKiB, b.asIs.RSSKiB), per(a.gc.RSSKiB, b.gc.RSSKiB), per(a.gc.RSSAnonKiB, b.gc.RSSAnonKiB),
			per(a.gc.RSSFileKiB, b.gc.RSSFileKiB), fmt.Sprintf("%.0f B", (float64(a.gc.HeapLive)-float64(b.gc.HeapLive))/n),
			fmt.Sprintf("%.0f B", float64(a.disk["total"]-b.disk["total"])/n),
			ps.Max().Round(time.Microsecond))
	}
}

// measurePairs runs count sequential Lock+Unlock pairs from the load
// member and count inside follower r.f, and as many in the control
// cluster's, alternating the four in chunks so that each sees the same
// minutes of the machine. into (nil: discard) receives the four series in
// that order: load, follower, control load, control follower.
func (r *run) measurePairs(ctx context.Context, phase string, count int, into []*[]time.Duration) error {
	const chunk = 50
	var got [4][]time.Duration
	for i := 0; i < count; i += chunk {
		k := min(chunk, count-i)
		ds, _, err := pairs(ctx, r.c.load, fmt.Sprintf("other/%s-%d", phase, i), k)
		if err != nil {
			return err
		}
		got[0] = append(got[0], ds...)
		if r.ctl != nil {
			if ds, _, err = pairs(ctx, r.ctl.load, fmt.Sprintf("other/%s-%d", phase, i), k); err != nil {
				return fmt.Errorf("control cluster: %w", err)
			}
			got[2] = append(got[2], ds...)
		}
		if ds, err = repPairs(r.f, fmt.Sprintf("other/%s-%d-%s", phase, i, r.f.name()), k); err != nil {
			return err
		}
		got[1] = append(got[1], ds...)
		if r.ctl != nil {
			if ds, err = repPairs(r.cf, fmt.Sprintf("other/%s-%d-%s", phase, i, r.cf.name()), k); err != nil {
				return fmt.Errorf("control cluster: %w", err)
			}
			got[3] = append(got[3], ds...)
		}
	}
	for i, p := range into {
		*p = got[i]
	}
	return nil
}

// controlled is the full ÷ empty p50 ratio of a series against the same
// ratio of the control's series measured beside it: the table's own cost,
// with what the machine did meanwhile divided out (0: no control).
func controlled(empty, full, ctlEmpty, ctlFull []time.Duration) float64 {
	if len(ctlEmpty) == 0 || len(ctlFull) == 0 {
		return 0
	}
	raw := ratio(summarize(full).p50, summarize(empty).p50)
	drift := ratio(summarize(ctlFull).p50, summarize(ctlEmpty).p50)
	if drift == 0 {
		return 0
	}
	return raw / drift
}

func (r *run) printLatency() {
	fmt.Printf("\n2. Lock+Unlock on other names, %d sequential pairs each, alternated in runs of 50 with the control cluster's; load average %s\n",
		*flagPairs, childproc.Loadavg())
	row := func(from string, empty, full []time.Duration) {
		a0, a1 := summarize(empty), summarize(full)
		fmt.Printf("%-32s | %-40s | %-40s | %.2f× (p99 %.2f×)\n", from, a0, a1, ratio(a1.p50, a0.p50), ratio(a1.p99, a0.p99))
	}
	fmt.Printf("%-32s | %-40s | %-40s | %s\n", "from", "empty cluster", "table full", "p50 ratio (target ≤ 1.2×)")
	row("the load process (member 4)", r.lat0, r.lat1)
	row("inside follower "+r.f.name(), r.rlat0, r.rlat1)
	if r.ctl == nil {
		return
	}
	row("control: its load process", r.clat0, r.clat1)
	row("control: inside follower "+r.cf.name(), r.crlat0, r.crlat1)
	fmt.Printf("the table's own cost, each ratio ÷ its control's (the control stays empty: its ratio is the machine's drift): load process %.2f×, follower %.2f×\n",
		controlled(r.lat0, r.lat1, r.clat0, r.clat1), controlled(r.rlat0, r.rlat1, r.crlat0, r.crlat1))
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// paging pages through the table through the leader's admin handler and a
// follower's, while the load process runs sequential Lock+Unlock pairs.
func (r *run) paging(ctx context.Context) error {
	if !*flagPaging {
		fmt.Printf("\n6. paging: skipped (-paging=false)\n")
		return nil
	}
	c := r.c
	fmt.Printf("\n6. paging over the table through the admin handler's /locks (as lockraftctl locks), %d names a page, linearizable reads,\n", *flagPage)
	fmt.Printf("   while the load process runs sequential Lock+Unlock pairs; load average %s\n", childproc.Loadavg())
	fmt.Printf("%-14s | %6s %9s %8s %8s | %11s %11s | %s\n", "through", "pages", "names", "waiters", "time s",
		"page p50 ms", "page max ms", "Lock+Unlock pairs meanwhile")
	var baseline lat
	if len(r.lat1) > 0 {
		baseline = summarize(r.lat1)
	}
	for _, via := range []*member{c.leader(), c.followers()[0]} {
		role := via.name() + " leader"
		if via != c.leader() {
			role = via.name() + " follower"
		}
		stop := make(chan struct{})
		var loop []time.Duration
		var loopErr error
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				lctx, cancel := context.WithTimeout(ctx, time.Minute)
				l, err := c.load.Lock(lctx, fmt.Sprintf("paging/%s/%d", via.name(), i))
				if err == nil {
					err = l.Unlock(lctx)
				}
				cancel()
				if err != nil {
					loopErr = err
					return
				}
				loop = append(loop, time.Since(t0))
			}
		})
		start := time.Now()
		var pageDs []time.Duration
		names, waiters, after := 0, 0, ""
		var perr error
		for {
			q := url.Values{"prefix": {"scale/"}, "limit": {fmt.Sprint(*flagPage)}, "timeout": {"60s"}}
			if after != "" {
				q.Set("after", after)
			}
			t0 := time.Now()
			code, body := childproc.Get(via.url+"/lockraft/locks?"+q.Encode(), 65*time.Second)
			pageDs = append(pageDs, time.Since(t0))
			var pg lockraft.LocksPage
			if code != 200 || json.Unmarshal([]byte(body), &pg) != nil {
				if len(body) > 300 {
					body = body[:300]
				}
				perr = fmt.Errorf("page after %q through %s: %d %s", after, via.name(), code, body)
				break
			}
			names += len(pg.Locks)
			for _, l := range pg.Locks {
				waiters += len(l.Waiters)
			}
			if pg.Next == "" || ctx.Err() != nil {
				break
			}
			after = pg.Next
		}
		total := time.Since(start)
		close(stop)
		wg.Wait()
		if perr != nil {
			return perr
		}
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		ps, ls := summarize(pageDs), summarize(loop)
		r.pagingWorst = max(r.pagingWorst, ls.max)
		note := ""
		if loopErr != nil {
			note = fmt.Sprintf("; a pair failed: %v", loopErr)
		}
		fmt.Printf("%-14s | %6d %9d %8d %8.2f | %11s %11s | %d pairs: %s (vs p99 %s ms at rest)%s\n", role, len(pageDs), names, waiters,
			total.Seconds(), ms(ps.p50), ms(ps.max), len(loop), ls, ms(baseline.p99), note)
		r.pagingResults = append(r.pagingResults, fmt.Sprintf("through %s: %.1f s for %d names; pairs meanwhile max %s ms", role, total.Seconds(), names, ms(ls.max)))
	}
	return nil
}

// restartFollower kills a follower (SIGKILL) and starts it again on its
// data directory.
func (r *run) restartFollower(ctx context.Context) error {
	c := r.c
	m := c.followers()[0]
	fmt.Printf("\n4. follower %s killed (SIGKILL) and started again on its data directory (%s); load average %s\n",
		m.name(), diskString(du(m.dir)), childproc.Loadavg())
	m.proc.Kill()
	killed := time.Now()
	if err := c.start(m); err != nil {
		return err
	}
	sv, err := waitServing(ctx, m, 2*time.Minute+time.Duration(r.held/1000)*100*time.Millisecond)
	if err != nil {
		return err
	}
	r.restart, r.restartWall = sv, time.Since(killed)
	fmt.Printf("from its new process's start: Join returned %s ms, Ready %s ms, first Lock+Unlock through it %s ms (target ≤ 5 s); from the kill, seen by the parent: %s ms\n",
		ms(us(sv.JoinUS)), ms(us(sv.ReadyUS)), ms(us(sv.LockUS)), ms(r.restartWall))
	return nil
}

func us(v int64) time.Duration { return time.Duration(v) * time.Microsecond }

// newMember starts member 5 for the first time, on an empty data
// directory, and measures how long it takes to hold the table: the leader
// must send it a snapshot (or the log, below the first snapshot).
func (r *run) newMember(ctx context.Context) error {
	c := r.c
	leader := c.leader()
	if leader == nil {
		return errors.New("no replica leads")
	}
	marker, err := c.load.Lock(ctx, "marker/snapshot")
	if err != nil {
		return fmt.Errorf("marker lock: %w", err)
	}
	st, err := status(leader)
	if err != nil {
		return err
	}
	snapBytes := largestFile(filepath.Join(leader.dir, "snap"))
	// Every process's CPU over the catch-up: on two cores, what else runs meanwhile is what a member
	// that restores a million names waits for.
	cpuBefore := make([]int64, len(c.reps))
	for i, rep := range c.reps {
		if s, err := childproc.FetchStats(rep.url, false); err == nil {
			cpuBefore[i] = s.CPUMicros
		}
	}
	selfBefore, cpuSince := childproc.ReadStats().CPUMicros, time.Now()
	m := c.newMember(5)
	fmt.Printf("\n5. new member %s started on an empty data directory (listed from the start, never run until now);\n", m.name())
	fmt.Printf("   leader %s: commit %d, marker granted at %d, its latest snapshot file %.1f MiB; load average %s\n",
		leader.name(), st.Commit, marker.Token(), mib(snapBytes), childproc.Loadavg())
	if err := c.start(m, "-metrics"); err != nil {
		return err
	}
	c.fresh = m
	started := m.proc.Started
	timeout := time.Minute + time.Duration(r.held/1000)*100*time.Millisecond
	// The steps on the way, from its snapshot directory: a transfer in
	// progress (a temporary file), a snapshot received; then the table
	// installed (its first name, scale/0, in its table).
	var transferAt, receivedAt, installedAt time.Duration
	snapDir := filepath.Join(m.dir, "snap")
	for {
		if transferAt == 0 {
			if tmps, _ := filepath.Glob(filepath.Join(snapDir, "*.snap.tmp-*")); len(tmps) > 0 {
				transferAt = time.Since(started)
			}
		}
		if receivedAt == 0 {
			if snaps, _ := filepath.Glob(filepath.Join(snapDir, "*.snap")); len(snaps) > 0 {
				receivedAt = time.Since(started)
			}
		}
		if installedAt == 0 {
			if code, _ := childproc.Get(m.url+"/lockraft/lock?stale=1&name="+r.p.name(0), 10*time.Second); code == 200 {
				installedAt = time.Since(started)
			}
		}
		code, body := childproc.Get(m.url+"/lockraft/lock?stale=1&name=marker/snapshot", 10*time.Second)
		var v lockraft.LockView
		if code == 200 && json.Unmarshal([]byte(body), &v) == nil && v.Holder != nil && v.Holder.Token == marker.Token() {
			r.catchUp = time.Since(started)
			break
		}
		if time.Since(started) > timeout {
			fmt.Printf("NOT caught up within %v (the marker is not in its table; last answer %d %.200s)\n", timeout, code, body)
			return nil
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	window := time.Since(cpuSince)
	var cpu []string
	for i, rep := range append(c.reps, m) {
		s, err := childproc.FetchStats(rep.url, false)
		if err != nil {
			continue
		}
		used := s.CPUMicros
		if i < len(cpuBefore) {
			used -= cpuBefore[i]
		}
		cpu = append(cpu, fmt.Sprintf("%s %.0f %%", rep.name(), float64(used)/float64(window.Microseconds())*100))
	}
	cpu = append(cpu, fmt.Sprintf("the load process %.0f %%", float64(childproc.ReadStats().CPUMicros-selfBefore)/float64(window.Microseconds())*100))
	fmt.Printf("CPU from just before its start until it caught up (%s ms), %% of a core: %s\n", ms(window), strings.Join(cpu, ", "))
	sv, err := waitServing(ctx, m, timeout)
	if err != nil {
		return err
	}
	r.snapServe = sv
	mst, err := status(m)
	if err != nil {
		return err
	}
	code, body := childproc.Get(m.url+"/restored", time.Minute)
	if _, err := fmt.Sscan(body, &r.snapRestored); code != 200 || err != nil {
		return fmt.Errorf("%s restores: %d %s", m.name(), code, body)
	}
	r.snapBytes = snapBytes
	fmt.Printf("caught up (holds the marker: applied ≥ %d) %s ms after its process started (target ≤ 5 s); Join returned %s ms, first Lock+Unlock %s ms;\n",
		marker.Token(), ms(r.catchUp), ms(us(sv.JoinUS)), ms(us(sv.LockUS)))
	seen := func(d time.Duration) string {
		if d == 0 {
			return "not seen"
		}
		return ms(d) + " ms"
	}
	fmt.Printf("on the way (polled every 20 ms; from its start): first heard a leader %s (its log), snapshot transfer seen %s, snapshot file complete %s,\n",
		seen(firstLogged(m.logPath, `msg="leader changed"`, started)), seen(transferAt), seen(receivedAt))
	fmt.Printf("table in place (%s in its table) %s, marker applied %s\n", r.p.name(0), seen(installedAt), seen(r.catchUp))
	fmt.Printf("now applied %d (leader's commit at its start %d), %d lock names; table restored from a leader's snapshot %d time(s) (lockraft_snapshots_restored_total); data directory %s\n",
		mst.Applied, st.Commit, mst.LockNames, r.snapRestored, diskString(du(m.dir)))
	return sleep(ctx, *flagSettle)
}

func (r *run) summary() {
	fmt.Printf("\nsummary (%d held locks, %d waiters); load average %s\n", r.held, r.p.waiters, childproc.Loadavg())
	fmt.Printf("%-46s | %-58s | %s\n", "measure", "figure", "target")
	var rss []string
	for i, m := range r.c.reps {
		rss = append(rss, fmt.Sprintf("%s %.0f B", m.name(), float64(r.full[i].gc.RSSKiB-r.empty[i].gc.RSSKiB)*1024/float64(r.held)))
	}
	fmt.Printf("%-46s | %-58s | %s\n", "RSS per held lock per replica (GC'd)", strings.Join(rss, ", "), "≤ 200 B")
	var heap []string
	for i, m := range r.c.reps {
		heap = append(heap, fmt.Sprintf("%s %.0f B", m.name(), (float64(r.full[i].gc.HeapLive)-float64(r.empty[i].gc.HeapLive))/float64(r.held)))
	}
	fmt.Printf("%-46s | %-58s | %s\n", "live heap per held lock per replica", strings.Join(heap, ", "), "")
	a0, a1 := summarize(r.lat0), summarize(r.lat1)
	fmt.Printf("%-46s | %-58s | %s\n", "Lock+Unlock p50 full/empty (load process)", fmt.Sprintf("%.2f× (%s → %s ms)", ratio(a1.p50, a0.p50), ms(a0.p50), ms(a1.p50)), "≤ 1.2×")
	b0, b1, b2 := summarize(r.rlat0), summarize(r.rlat1), summarize(r.rlat2)
	fmt.Printf("%-46s | %-58s | %s\n", "the same inside follower "+r.f.name()+" (and released)", fmt.Sprintf("%.2f× (%s → %s ms; released %s ms)", ratio(b1.p50, b0.p50), ms(b0.p50), ms(b1.p50), ms(b2.p50)), "≤ 1.2×")
	if r.ctl != nil {
		c0, c1 := summarize(r.clat0), summarize(r.clat1)
		fmt.Printf("%-46s | %-58s | %s\n", "the same ÷ the control's (load process)", fmt.Sprintf("%.2f× (control %s → %s ms)",
			controlled(r.lat0, r.lat1, r.clat0, r.clat1), ms(c0.p50), ms(c1.p50)), "≤ 1.2×")
		d0, d1 := summarize(r.crlat0), summarize(r.crlat1)
		fmt.Printf("%-46s | %-58s | %s\n", "the same ÷ the control's (follower)", fmt.Sprintf("%.2f× (control %s → %s ms)",
			controlled(r.rlat0, r.rlat1, r.crlat0, r.crlat1), ms(d0.p50), ms(d1.p50)), "≤ 1.2×")
	}
	fmt.Printf("%-46s | %-58s | %s\n", "restarted follower serving (first Lock)", fmt.Sprintf("%s ms", ms(us(r.restart.LockUS))), "≤ 5 s")
	snap := "not caught up"
	if r.catchUp > 0 {
		snap = fmt.Sprintf("%s ms (snapshot %.1f MiB, restored %d×)", ms(r.catchUp), mib(r.snapBytes), r.snapRestored)
	}
	fmt.Printf("%-46s | %-58s | %s\n", "new member caught up", snap, "≤ 5 s")
	fmt.Printf("%-46s | %-58s | %s\n", "paging the table: worst Lock+Unlock meanwhile", ms(r.pagingWorst)+" ms", "no stall")
	var rest []string
	for i, m := range r.c.reps {
		if i < len(r.rest0) && i < len(r.rest1) {
			rest = append(rest, fmt.Sprintf("%s %.2f → %.2f %%", m.name(), r.rest0[i], r.rest1[i]))
		}
	}
	lease := "no leases"
	if *flagLease > 0 {
		lease = "each with a lease"
	}
	fmt.Printf("%-46s | %-58s | %s\n", "CPU at rest, empty → full ("+lease+")", strings.Join(rest, ", "), "")
}

// firstLogged is when the first line of the log at path containing what
// was written, counted from since (0: no such line).
func firstLogged(path, what string, since time.Time) time.Duration {
	b, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, what) {
			continue
		}
		v, ok := strings.CutPrefix(line, "time=")
		if !ok {
			continue
		}
		v, _, _ = strings.Cut(v, " ")
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil && t.After(since) {
			return t.Sub(since)
		}
	}
	return 0
}
