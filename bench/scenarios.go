package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// config holds the scenario sizes.
type config struct {
	quick      bool
	runs       int
	scenarios  map[string]bool
	tmp        string
	s1Pairs    int           // S1: sequential pairs (also bounded by s1Max)
	s1Max      time.Duration //
	s2Dur      time.Duration // S2: 64 callers for this long
	s3Dur      time.Duration // S3: 16 callers on one name for this long
	s4Handoffs int           // S4: graceful handoffs measured
	s4Settle   time.Duration // S4: how long the waiter gets to queue before the Unlock
	ttl        time.Duration // S4/S5: session TTL, lease TTL or PX for every system
	opTimeout  time.Duration
	s2Callers  int
	s3Callers  int
	// overlapWaits (-quick) runs the crash takeovers (S4) and failovers
	// (S5) of every system of a run at the same time, each on its own fresh
	// cluster, after the run's other scenarios: they are mostly idle waits
	// (a session TTL, an election timeout) whose results are in tens of
	// milliseconds to seconds, so they barely disturb each other. The full
	// run keeps them one after the other.
	overlapWaits bool
}

func defaultConfig(quick bool) config {
	c := config{quick: quick, s1Pairs: 1000, s1Max: 8 * time.Second, s2Dur: 10 * time.Second,
		s3Dur: 6 * time.Second, s4Handoffs: 20, s4Settle: 150 * time.Millisecond, ttl: 3 * time.Second, opTimeout: 30 * time.Second,
		s2Callers: 64, s3Callers: 16}
	if quick {
		// S4's settle stays 150 ms: with 50 ms etcd's waiter was sometimes
		// not queued yet, and its setup counted as handoff time.
		c.s1Pairs, c.s1Max, c.s2Dur, c.s3Dur, c.s4Handoffs = 150, 2*time.Second, 1500*time.Millisecond, time.Second, 5
		c.overlapWaits = true
	}
	return c
}

// A system is one running cluster or server set.
type system interface {
	// caller returns the i-th caller; callers are spread over the members
	// the way an embedding service (or a client pool) would spread them.
	caller(i int) (caller, error)
	stop()
}

// A caller takes and releases locks. Each caller is its own owner.
type caller interface {
	lock(ctx context.Context, name string) (unlock func(context.Context) error, err error)
	close()
}

// systemFactory starts fresh instances of one system.
type systemFactory struct {
	name      string
	available func() error
	// start starts a fresh instance; ttl is the session/lease/PX TTL.
	start func(dir string, ttl time.Duration) (system, error)
	// crashTakeover (S4): a holder takes name and then dies without
	// releasing while a waiter waits; returns the time from the death to
	// the waiter's grant.
	crashTakeover func(dir string, ttl time.Duration) (time.Duration, error)
	// failover (S5): the leader crashes (graceful false: no handover, as a
	// dead process) or is shut down gracefully (true: each system's own
	// shutdown, which hands leadership over); returns the time until a Lock
	// on another member succeeds. nil for systems without a leader.
	failover func(dir string, graceful bool) (time.Duration, error)
}

// failoverAttempt bounds each Lock attempt during S5; a timed-out attempt
// is retried at once. It sets the resolution of S5 for a system that loses
// a request sent just before the crash (etcd drops a proposal forwarded to
// a dead leader and answers only at the caller's deadline; lockraft
// re-proposes on a leader change).
const failoverAttempt = 500 * time.Millisecond

// freshFor starts a system of its own for one takeover or failover
// measurement with start and returns it with the measurement's context (it
// ends 30 s after the TTL could have) and the function that ends both.
func freshFor[S interface{ stop() }](dir string, ttl time.Duration,
	start func(dir string, ttl time.Duration) (S, error)) (S, context.Context, func(), error) {
	s, err := start(dir, ttl)
	if err != nil {
		return s, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ttl+30*time.Second)
	return s, ctx, func() { cancel(); s.stop() }, nil
}

var factories = map[string]systemFactory{}

func register(f systemFactory) { factories[f.name] = f }

// systemDir makes a fresh directory for one run of f's (its name starts
// with f's name and then prefix); "" when it cannot, which it reports as the
// run's setup failure.
func systemDir(cfg config, f systemFactory, prefix string, run int, rep *report) string {
	dir, err := os.MkdirTemp(cfg.tmp, f.name+prefix)
	if err != nil {
		rep.fail(f.name, "setup", run, err)
		return ""
	}
	return dir
}

func runSystem(cfg config, f systemFactory, run int, rep *report) {
	dir := systemDir(cfg, f, "-", run, rep)
	if dir == "" {
		return
	}
	defer os.RemoveAll(dir)
	fmt.Fprintf(os.Stderr, "run %d: %s (load %s)\n", run, f.name, loadAvg())
	if cfg.scenarios["S1"] || cfg.scenarios["S2"] || cfg.scenarios["P"] || cfg.scenarios["S3"] || cfg.scenarios["S4"] || catalogueScenarios(cfg) {
		sys, err := f.start(dir+"/main", cfg.ttl)
		if err != nil {
			rep.fail(f.name, "start", run, err)
			return
		}
		if cfg.scenarios["S1"] {
			rep.fail(f.name, "S1", run, runS1(cfg, f.name, sys, run, rep))
		}
		if cfg.scenarios["S2"] {
			rep.fail(f.name, "S2", run, runS2(cfg, f.name, sys, run, rep))
		}
		runPrimitives(cfg, f.name, sys, run, rep) // P (primitives.go)
		if cfg.scenarios["S3"] {
			rep.fail(f.name, "S3", run, runS3(cfg, f.name, sys, run, rep))
		}
		if cfg.scenarios["S4"] {
			rep.fail(f.name, "S4", run, runS4Graceful(cfg, f.name, sys, run, rep))
		}
		runCatalogue(cfg, f.name, sys, run, rep) // C1, C2, C4 (catalogue.go)
		sys.stop()
	}
	runC3(cfg, f, dir, run, rep)
	if !cfg.overlapWaits {
		runWaits(cfg, f, run, rep)
	}
}

// runWaitsTogether runs the crash takeovers and failovers of every system of
// one run at the same time (-quick).
func runWaitsTogether(cfg config, fs []systemFactory, run int, rep *report) {
	fmt.Fprintf(os.Stderr, "run %d: S4 crash takeover and S5 failover of every system at once (load %s)\n", run, loadAvg())
	var wg sync.WaitGroup
	for _, f := range fs {
		wg.Go(func() { runWaits(cfg, f, run, rep) })
	}
	wg.Wait()
}

// runWaits runs S4's crash takeover and S5's failover of one system, each on
// a fresh cluster (at the same time with -quick).
func runWaits(cfg config, f systemFactory, run int, rep *report) {
	dir := systemDir(cfg, f, "-waits-", run, rep)
	if dir == "" {
		return
	}
	defer os.RemoveAll(dir)
	var s4d, s5d, s5g time.Duration
	var s4err, s5err, s5gerr error
	s4 := func() { s4d, s4err = f.crashTakeover(dir+"/s4", cfg.ttl) }
	var wg sync.WaitGroup
	if cfg.scenarios["S4"] {
		if cfg.overlapWaits {
			wg.Go(s4)
		} else {
			s4()
		}
	}
	if cfg.scenarios["S5"] && f.failover != nil {
		s5d, s5err = f.failover(dir+"/s5", false)
		s5g, s5gerr = f.failover(dir+"/s5g", true)
	}
	wg.Wait()
	if cfg.scenarios["S4"] {
		if s4err == nil {
			rep.add(f.name, "S4", "takeover_ms", ms(s4d-cfg.ttl), run)
			rep.add(f.name, "S4", "crash_to_grant_ms", ms(s4d), run)
		}
		rep.fail(f.name, "S4 crash", run, s4err)
	}
	if cfg.scenarios["S5"] && f.failover != nil {
		if s5err == nil {
			rep.add(f.name, "S5", "unavailable_ms", ms(s5d), run)
		}
		rep.fail(f.name, "S5", run, s5err)
		if s5gerr == nil {
			rep.add(f.name, "S5", "graceful_unavailable_ms", ms(s5g), run)
		}
		rep.fail(f.name, "S5 graceful", run, s5gerr)
	}
}

func callers(sys system, n int) ([]caller, error) {
	cs := make([]caller, 0, n)
	for i := range n {
		c, err := sys.caller(i)
		if err != nil {
			closeCallers(cs)
			return nil, err
		}
		cs = append(cs, c)
	}
	return cs, nil
}

func closeCallers(cs []caller) {
	for _, c := range cs {
		c.close()
	}
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

// lockFn takes name once with one primitive of a caller (mutexLock: the
// plain Lock; primitives.go: the catalogue's) and returns its release.
type lockFn func(ctx context.Context, c caller, name string) (func(context.Context) error, error)

func mutexLock(ctx context.Context, c caller, name string) (func(context.Context) error, error) {
	return c.lock(ctx, name)
}

// pair takes and releases name once; it returns the pair's latency.
func pair(ctx context.Context, c caller, name string) (time.Duration, error) {
	return pairWith(ctx, c, name, mutexLock)
}

// pairWith is pair with the primitive lock.
func pairWith(ctx context.Context, c caller, name string, lock lockFn) (time.Duration, error) {
	t := time.Now()
	unlock, err := lock(ctx, c, name)
	if err != nil {
		return 0, fmt.Errorf("lock %s: %w", name, err)
	}
	if err := unlock(ctx); err != nil {
		return 0, fmt.Errorf("unlock %s: %w", name, err)
	}
	return time.Since(t), nil
}

// S1: one caller, sequential Lock+Unlock of distinct names, round robin
// over the members (for lockraft: callers on every node).
func runS1(cfg config, sysName string, sys system, run int, rep *report) error {
	return runS1With(cfg, sysName, "S1", sys, run, rep, mutexLock)
}

// runS1With is S1 with the primitive lock, reported as scenario scen.
func runS1With(cfg config, sysName, scen string, sys system, run int, rep *report, lock lockFn) error {
	cs, err := callers(sys, 3)
	if err != nil {
		return err
	}
	defer closeCallers(cs)
	ctx := context.Background()
	for i := range 3 * 5 { // warm up every connection
		if _, err := pairWith(ctx, cs[i%3], fmt.Sprintf("%sw/%d/%d", scen, run, i), lock); err != nil {
			return err
		}
	}
	lat := make([]time.Duration, 0, cfg.s1Pairs)
	start := time.Now()
	for i := 0; i < cfg.s1Pairs && time.Since(start) < cfg.s1Max; i++ {
		c, cancel := context.WithTimeout(ctx, cfg.opTimeout)
		d, err := pairWith(c, cs[i%3], fmt.Sprintf("%s/%d/%d", scen, run, i), lock)
		cancel()
		if err != nil {
			return err
		}
		lat = append(lat, d)
	}
	el := time.Since(start)
	rep.addMedianP99(sysName, scen, "pair", lat, run)
	rep.add(sysName, scen, "pairs_per_s", float64(len(lat))/el.Seconds(), run)
	return nil
}

// S2: 64 callers, each on its own names, for a fixed time.
func runS2(cfg config, sysName string, sys system, run int, rep *report) error {
	return runS2With(cfg, sysName, "S2", sys, run, rep, mutexLock)
}

// runS2With is S2 with the primitive lock, reported as scenario scen.
func runS2With(cfg config, sysName, scen string, sys system, run int, rep *report, lock lockFn) error {
	cs, err := callers(sys, cfg.s2Callers)
	if err != nil {
		return err
	}
	defer closeCallers(cs)
	ctx := context.Background()
	var mu sync.Mutex
	var all []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	cost := startCost(sys)
	start := time.Now()
	deadline := start.Add(cfg.s2Dur)
	for g, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			for i := 0; time.Now().Before(deadline); i++ {
				cc, cancel := context.WithTimeout(ctx, cfg.opTimeout)
				d, err := pairWith(cc, c, fmt.Sprintf("%s/%d/%d/%d", scen, run, g, i), lock)
				cancel()
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				lat = append(lat, d)
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if firstErr != nil {
		return firstErr
	}
	cost.report(rep, sysName, scen, len(all), run)
	rep.add(sysName, scen, "pairs_per_s", float64(len(all))/el.Seconds(), run)
	rep.addMedianP99(sysName, scen, "pair", all, run)
	return nil
}

// grant is one S3 acquisition: who, when it asked (global request order)
// and when it was granted (global grant order, taken under the lock).
type grant struct {
	caller  int
	reqSeq  int64
	reqTime time.Time
}

// S3: 16 callers on one name, empty critical section.
func runS3(cfg config, sysName string, sys system, run int, rep *report) error {
	cs, err := callers(sys, cfg.s3Callers)
	if err != nil {
		return err
	}
	defer closeCallers(cs)
	name := fmt.Sprintf("s3/%d/hot", run)
	var reqSeq atomic.Int64
	seqs := make([]int64, len(cs)) // caller i's request order, written by caller i only
	var grants []grant             // appended under the lock being measured
	var gmu sync.Mutex
	var inside atomic.Int32
	var overlaps atomic.Int64
	waits, el, err := contend(cfg, cfg.s3Dur, len(cs), func(i int) acquireFunc {
		seqs[i] = reqSeq.Add(1)
		return func(ctx context.Context) (func(context.Context) error, error) { return cs[i].lock(ctx, name) }
	}, func(i int, asked time.Time) {
		if inside.Add(1) != 1 {
			overlaps.Add(1)
		}
		gmu.Lock() // exclusion comes from the lock under test; this only orders memory
		grants = append(grants, grant{caller: i, reqSeq: seqs[i], reqTime: asked})
		gmu.Unlock()
		inside.Add(-1)
	})
	if err != nil {
		return err
	}
	changes := 0
	for i := 1; i < len(grants); i++ {
		if grants[i].caller != grants[i-1].caller {
			changes++
		}
	}
	inv, inv1ms, barging, maxGap := fifoStatsMax(grants)
	sameMember := fifoInversionsSameMember(grants, 3)
	all := slices.Concat(waits...)
	rep.add(sysName, "S3", "holder_changes_per_s", float64(changes)/el.Seconds(), run)
	rep.add(sysName, "S3", "grants_per_s", float64(len(grants))/el.Seconds(), run)
	rep.addMedianP99(sysName, "S3", "wait", all, run)
	rep.add(sysName, "S3", "fifo_inversions", float64(inv), run)
	rep.add(sysName, "S3", "fifo_inversions_gt1ms", float64(inv1ms), run)
	rep.add(sysName, "S3", "fifo_inversion_max_head_start_ms", ms(maxGap), run)
	rep.add(sysName, "S3", "fifo_inversions_same_member", float64(sameMember), run)
	rep.add(sysName, "S3", "barging", float64(barging), run)
	rep.addViolations(sysName, "S3", "mutual_exclusion_violations", overlaps.Load(), run)
	return nil
}

// An acquireFunc asks for one grant; release gives it back.
type acquireFunc func(ctx context.Context) (release func(context.Context) error, err error)

// contend runs n callers, each in its own goroutine, until dur has passed. In each round caller i asks
// with the acquireFunc next(i) gives (under cfg.opTimeout; the time until it returns is the round's wait),
// runs held while it holds the grant (asked: when it asked), and gives the grant back. A caller stops at
// its first error. contend returns each caller's waits, the time from the start until the last caller
// stopped, and the first error.
func contend(cfg config, dur time.Duration, n int, next func(i int) acquireFunc,
	held func(i int, asked time.Time)) (waits [][]time.Duration, el time.Duration, err error) {
	waits = make([][]time.Duration, n)
	var first errOnce
	start := time.Now()
	deadline := start.Add(dur)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				acquire := next(i)
				ctx, cancel := context.WithTimeout(context.Background(), cfg.opTimeout)
				t := time.Now()
				release, err := acquire(ctx)
				if err != nil {
					cancel()
					first.set(fmt.Errorf("caller %d: %w", i, err))
					return
				}
				waits[i] = append(waits[i], time.Since(t))
				held(i, t)
				err = release(ctx)
				cancel()
				if err != nil {
					first.set(fmt.Errorf("caller %d unlock: %w", i, err))
					return
				}
			}
		})
	}
	wg.Wait()
	return waits, time.Since(start), first.err
}

// errOnce keeps the first error set.
type errOnce struct {
	mu  sync.Mutex
	err error
}

func (e *errOnce) set(err error) {
	e.mu.Lock()
	if e.err == nil {
		e.err = err
	}
	e.mu.Unlock()
}

// fifoStats counts, in grant order:
//   - inversions: grants whose request came after the request of some grant
//     made later (someone who asked earlier was overtaken);
//   - inversions by more than 1 ms of request time (excludes near-ties
//     between requests issued on different members at the same moment);
//   - barging: a caller granted twice in a row although another caller had
//     asked before its second request and was still waiting.
func fifoStats(gs []grant) (inv, inv1ms, barging int) {
	inv, inv1ms, barging, _ = fifoStatsMax(gs)
	return
}

// fifoStatsMax is fifoStats plus the largest head start (request time) an
// overtaken request had over the grant that overtook it.
func fifoStatsMax(gs []grant) (inv, inv1ms, barging int, maxGap time.Duration) {
	minSeq := int64(1 << 62)
	var minTime time.Time
	for i := len(gs) - 1; i >= 0; i-- {
		g := gs[i]
		if g.reqSeq > minSeq {
			inv++
			gap := g.reqTime.Sub(minTime)
			if gap > time.Millisecond {
				inv1ms++
			}
			maxGap = max(maxGap, gap)
			if i > 0 && gs[i-1].caller == g.caller {
				barging++
			}
		}
		if g.reqSeq < minSeq {
			minSeq, minTime = g.reqSeq, g.reqTime
		}
	}
	return inv, inv1ms, barging, maxGap
}

// fifoInversionsSameMember counts the inversions between callers that call
// through the same member (caller i uses member i%members in the clustered
// systems): a request that reaches the leader through another member can be
// overtaken by one made a forwarding hop later, so cross-member inversions
// up to about one hop are expected in commit order; same-member ones are not.
func fifoInversionsSameMember(gs []grant, members int) int {
	minSeq := make([]int64, members)
	for i := range minSeq {
		minSeq[i] = 1 << 62
	}
	inv := 0
	for i := len(gs) - 1; i >= 0; i-- {
		g := gs[i]
		m := g.caller % members
		if g.reqSeq > minSeq[m] {
			inv++
		}
		minSeq[m] = min(minSeq[m], g.reqSeq)
	}
	return inv
}

// S4 (graceful): the holder unlocks while a waiter on another member waits;
// time from the Unlock call to the waiter's grant.
func runS4Graceful(cfg config, sysName string, sys system, run int, rep *report) error {
	cs, err := callers(sys, 2)
	if err != nil {
		return err
	}
	defer closeCallers(cs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var lat []time.Duration
	for i := range cfg.s4Handoffs {
		name := fmt.Sprintf("s4g/%d/%d", run, i)
		holder, waiter := cs[i%2], cs[(i+1)%2]
		unlock, err := holder.lock(ctx, name)
		if err != nil {
			return err
		}
		granted := make(chan time.Time, 1)
		errc := make(chan error, 1)
		go func() {
			u, err := waiter.lock(ctx, name)
			if err != nil {
				errc <- err
				return
			}
			granted <- time.Now()
			u(ctx)
		}()
		time.Sleep(cfg.s4Settle) // let the waiter queue (or start polling)
		t0 := time.Now()
		if err := unlock(ctx); err != nil {
			return err
		}
		select {
		case t1 := <-granted:
			lat = append(lat, t1.Sub(t0))
		case err := <-errc:
			return err
		}
	}
	rep.add(sysName, "S4", "graceful_handoff_p50_ms", ms(pct(lat, 0.5)), run)
	rep.add(sysName, "S4", "graceful_handoff_max_ms", ms(pct(lat, 1)), run)
	return nil
}

// grantResult is when a lock asked for in the background was granted, or why it was not.
type grantResult struct {
	t   time.Time
	err error
}

// since is the time from t0 until the grant, or the error.
func (r grantResult) since(t0 time.Time) (time.Duration, error) {
	if r.err != nil {
		return 0, r.err
	}
	return r.t.Sub(t0), nil
}

// waitGrant asks c for name in the background; the channel gets the grant's time or the error.
func waitGrant(ctx context.Context, c caller, name string) chan grantResult {
	ch := make(chan grantResult, 1)
	go func() {
		_, err := c.lock(ctx, name)
		ch <- grantResult{time.Now(), err}
	}()
	return ch
}

var errTimeout = errors.New("timed out")
