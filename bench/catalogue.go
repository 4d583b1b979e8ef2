package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node"
)

// The catalogue's scenarios (run them with -scenarios C1,C2,C3,C4):
//
//	C1  read-write lock: 16 readers and 1 writer on one name, empty critical
//	    sections: grants/s, the writer's wait p50/p99, the readers' p99.
//	C2  semaphore of 8 permits, 32 callers taking 1 each and holding it 1 ms:
//	    acquisitions/s, wait p50/p99, the most permits held at once (≤ 8).
//	C3  election failover: the node of the election's leader crashes; the
//	    time until an observer on another node sees the next campaigner lead.
//	C4  LockAll of 4 names (of 16) under 64 callers: grants/s, wait p50/p99.
//
// Peers where they have the primitive in Go: etcd's recipes RWMutex (C1),
// concurrency.Election (C3), and for C4 what an etcd user writes without a
// multi-name lock: concurrency.Mutex on each name in sorted order (lock
// ordering against deadlock, one round trip per name). None has a
// semaphore in Go (Redisson's RSemaphore and Curator's
// InterProcessSemaphoreV2 are Java), so C2 is lockraft's alone.

// Optional capabilities of a caller.
type rwCaller interface {
	rlock(ctx context.Context, name string) (func(context.Context) error, error)
	wlock(ctx context.Context, name string) (func(context.Context) error, error)
}

type semCaller interface {
	acquire(ctx context.Context, name string, size, k int) (func(context.Context) error, error)
}

type multiCaller interface {
	lockAll(ctx context.Context, names []string) (func(context.Context) error, error)
}

// electionFailovers (C3) by system: the leader's node crashes; returns the
// time until an observer elsewhere sees the next leader.
var electionFailovers = map[string]func(dir string, ttl time.Duration) (time.Duration, error){}

func init() {
	electionFailovers["lockraft"] = lockraftElectionFailover
	electionFailovers["etcd"] = etcdElectionFailover
}

func catalogueScenarios(cfg config) bool {
	return cfg.scenarios["C1"] || cfg.scenarios["C2"] || cfg.scenarios["C4"]
}

// runCatalogue runs C1, C2 and C4 on a started system.
func runCatalogue(cfg config, sysName string, sys system, run int, rep *report) {
	if cfg.scenarios["C1"] {
		rep.fail(sysName, "C1", run, runC1(cfg, sysName, sys, run, rep))
	}
	if cfg.scenarios["C2"] {
		rep.fail(sysName, "C2", run, runC2(cfg, sysName, sys, run, rep))
	}
	if cfg.scenarios["C4"] {
		rep.fail(sysName, "C4", run, runC4(cfg, sysName, sys, run, rep))
	}
}

// runC3 runs the election failover of one system on a fresh cluster.
func runC3(cfg config, f systemFactory, dir string, run int, rep *report) {
	fo, ok := electionFailovers[f.name]
	if !cfg.scenarios["C3"] || !ok {
		return
	}
	d, err := fo(dir+"/c3", cfg.ttl)
	if err == nil {
		rep.add(f.name, "C3", "crash_to_new_leader_observed_ms", ms(d), run)
	}
	rep.fail(f.name, "C3", run, err)
}

// callersOf opens n callers of sys as Cs, the interface of an optional capability, and returns them
// with the function that closes them; none (and nothing left open) if sys's callers lack it.
func callersOf[C any](sys system, n int) ([]C, func(), error) {
	cs, err := callers(sys, n)
	if err != nil {
		return nil, nil, err
	}
	out := make([]C, len(cs))
	for i, c := range cs {
		cc, ok := c.(C)
		if !ok {
			closeCallers(cs)
			return nil, nil, nil
		}
		out[i] = cc
	}
	return out, func() { closeCallers(cs) }, nil
}

// C1: 16 readers and 1 writer on one name.
func runC1(cfg config, sysName string, sys system, run int, rep *report) error {
	const readers = 16
	rcs, closeAll, err := callersOf[rwCaller](sys, readers+1)
	if rcs == nil {
		return err // nil: not this system's primitive
	}
	defer closeAll()
	name := fmt.Sprintf("c1/%d", run)
	var readersIn, writersIn, violations atomic.Int64
	var rgrants, wgrants atomic.Int64
	waits, _, err := contend(cfg, cfg.s3Dur, len(rcs), func(i int) acquireFunc {
		if i == readers {
			return func(ctx context.Context) (func(context.Context) error, error) { return rcs[i].wlock(ctx, name) }
		}
		return func(ctx context.Context) (func(context.Context) error, error) { return rcs[i].rlock(ctx, name) }
	}, func(i int, _ time.Time) {
		if i == readers {
			if writersIn.Add(1) != 1 || readersIn.Load() != 0 {
				violations.Add(1)
			}
			wgrants.Add(1)
			writersIn.Add(-1)
			return
		}
		readersIn.Add(1)
		if writersIn.Load() != 0 {
			violations.Add(1)
		}
		rgrants.Add(1)
		readersIn.Add(-1)
	})
	if err != nil {
		return err
	}
	rwaits, wwaits := slices.Concat(waits[:readers]...), waits[readers]
	el := cfg.s3Dur.Seconds()
	rep.add(sysName, "C1", "grants_per_s", float64(rgrants.Load()+wgrants.Load())/el, run)
	rep.add(sysName, "C1", "writer_grants_per_s", float64(wgrants.Load())/el, run)
	rep.addMedianP99(sysName, "C1", "writer_wait", wwaits, run)
	rep.add(sysName, "C1", "reader_wait_p99_ms", ms(pct(rwaits, 0.99)), run)
	rep.addViolations(sysName, "C1", "exclusion_violations", violations.Load(), run)
	return nil
}

// C2: a semaphore of 8 permits, 32 callers taking one each.
func runC2(cfg config, sysName string, sys system, run int, rep *report) error {
	const size, n = 8, 32
	scs, closeAll, err := callersOf[semCaller](sys, n)
	if scs == nil {
		return err
	}
	defer closeAll()
	name := fmt.Sprintf("c2/%d", run)
	var in, most, over, grants atomic.Int64
	waits, _, err := contend(cfg, cfg.s3Dur, len(scs), func(i int) acquireFunc {
		return func(ctx context.Context) (func(context.Context) error, error) {
			return scs[i].acquire(ctx, name, size, 1)
		}
	}, func(int, time.Time) {
		now := in.Add(1)
		if now > size {
			over.Add(1)
		}
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		time.Sleep(time.Millisecond) // a short critical section, so that permits are held together
		grants.Add(1)
		in.Add(-1)
	})
	if err != nil {
		return err
	}
	all := slices.Concat(waits...)
	rep.add(sysName, "C2", "acquisitions_per_s", float64(grants.Load())/cfg.s3Dur.Seconds(), run)
	rep.addMedianP99(sysName, "C2", "wait", all, run)
	rep.add(sysName, "C2", "most_permits_in_use", float64(most.Load()), run)
	rep.addViolations(sysName, "C2", "over_limit_violations", over.Load(), run)
	return nil
}

// C4: 64 callers, each LockAll of 4 random names of 16.
func runC4(cfg config, sysName string, sys system, run int, rep *report) error {
	const n, pool, k = 64, 16, 4
	mcs, closeAll, err := callersOf[multiCaller](sys, n)
	if mcs == nil {
		return err
	}
	defer closeAll()
	var holders [pool]atomic.Int32
	var violations, grants atomic.Int64
	rngs := make([]*rand.Rand, n)
	idxs := make([][]int, n) // caller i's names this round, used by caller i only
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(uint64(run), uint64(i)))
	}
	waits, _, err := contend(cfg, cfg.s3Dur, len(mcs), func(i int) acquireFunc {
		idxs[i] = rngs[i].Perm(pool)[:k]
		names := make([]string, k)
		for j, x := range idxs[i] {
			names[j] = fmt.Sprintf("c4/%d/%d", run, x)
		}
		return func(ctx context.Context) (func(context.Context) error, error) { return mcs[i].lockAll(ctx, names) }
	}, func(i int, _ time.Time) {
		for _, x := range idxs[i] {
			if holders[x].Add(1) != 1 {
				violations.Add(1)
			}
		}
		grants.Add(1)
		for _, x := range idxs[i] {
			holders[x].Add(-1)
		}
	})
	if err != nil {
		return err
	}
	all := slices.Concat(waits...)
	rep.add(sysName, "C4", "lockall_per_s", float64(grants.Load())/cfg.s3Dur.Seconds(), run)
	rep.addMedianP99(sysName, "C4", "wait", all, run)
	rep.addViolations(sysName, "C4", "exclusion_violations", violations.Load(), run)
	return nil
}

// ---- lockraft ----

func (c *lockraftCaller) rlock(ctx context.Context, name string) (func(context.Context) error, error) {
	return c.hold(ctx, node.Request{Name: name, Primitive: lockfsm.PrimRW, Shared: true})
}

func (c *lockraftCaller) wlock(ctx context.Context, name string) (func(context.Context) error, error) {
	return c.hold(ctx, node.Request{Name: name, Primitive: lockfsm.PrimRW})
}

func (c *lockraftCaller) acquire(ctx context.Context, name string, size, k int) (func(context.Context) error, error) {
	return c.hold(ctx, node.Request{Name: name, Primitive: lockfsm.PrimSemaphore, Permits: uint32(k), Limit: uint32(size)})
}

func (c *lockraftCaller) lockAll(ctx context.Context, names []string) (func(context.Context) error, error) {
	return c.hold(ctx, node.Request{Name: names[0], ExtraNames: names[1:]})
}

func (c *lockraftCaller) hold(ctx context.Context, r node.Request) (func(context.Context) error, error) {
	r.Owner, r.Wait = c.owner, true
	h, err := c.n.AcquireWith(ctx, r)
	if err != nil {
		return nil, err
	}
	return h.Release, nil
}

// lockraftElectionFailover: the election's leader runs on a follower node,
// the next campaigner and an observer on the other follower; the leader's
// node crashes: its session (and leadership) ends after the TTL.
func lockraftElectionFailover(dir string, ttl time.Duration) (time.Duration, error) {
	c, ld, err := startWithLeader(dir, ttl, false)
	if err != nil {
		return 0, err
	}
	defer c.stop()
	h, w := c.nodes[(ld+1)%3], c.nodes[(ld+2)%3]
	ctx, cancel := context.WithTimeout(context.Background(), ttl+30*time.Second)
	defer cancel()
	campaign := func(n *node.Node, owner string) (*node.Hold, error) {
		return n.AcquireWith(ctx, node.Request{Name: "c3", Owner: owner, Wait: true, Primitive: lockfsm.PrimElection,
			Value: owner})
	}
	if _, err := campaign(h, "first"); err != nil {
		return 0, err
	}
	o, err := w.Observe(ctx, "c3")
	if err != nil {
		return 0, err
	}
	defer o.Close()
	for cur := (node.LeaderChange{}); cur.Owner != "first"; {
		// The observer's node may not have applied the campaign yet.
		if cur, err = o.Next(ctx); err != nil {
			return 0, fmt.Errorf("observer: %v", err)
		}
	}
	go campaign(w, "second")
	time.Sleep(300 * time.Millisecond) // the second campaign is queued
	t0 := time.Now()
	h.Crash()
	for {
		cur, err := o.Next(ctx)
		if err != nil {
			return 0, err
		}
		if cur.Owner == "second" {
			return time.Since(t0), nil
		}
	}
}

// ---- etcd ----

func (c *etcdCaller) rlock(_ context.Context, name string) (func(context.Context) error, error) {
	m := recipe.NewRWMutex(c.s, "/rw/"+name)
	return lockedBy(m.RLock, m.RUnlock)
}

func (c *etcdCaller) wlock(_ context.Context, name string) (func(context.Context) error, error) {
	m := recipe.NewRWMutex(c.s, "/rw/"+name)
	return lockedBy(m.Lock, m.Unlock)
}

// lockedBy takes a side of an etcd RWMutex with lock and returns its unlock as a caller's.
func lockedBy(lock, unlock func() error) (func(context.Context) error, error) {
	if err := lock(); err != nil {
		return nil, err
	}
	return func(context.Context) error { return unlock() }, nil
}

// lockAll with etcd: a concurrency.Mutex per name, in sorted order.
func (c *etcdCaller) lockAll(ctx context.Context, names []string) (func(context.Context) error, error) {
	sorted := slices.Sorted(slices.Values(names))
	var held []*concurrency.Mutex
	unlock := func(ctx context.Context) error {
		var first error
		for i := len(held) - 1; i >= 0; i-- {
			if err := held[i].Unlock(ctx); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	for _, n := range sorted {
		m := concurrency.NewMutex(c.s, "/locks/"+n)
		if err := m.Lock(ctx); err != nil {
			unlock(context.Background())
			return nil, err
		}
		held = append(held, m)
	}
	return unlock, nil
}

// etcdElectionFailover: the leader's client (its own process, as an
// embedding service would be) dies without revoking its lease; another
// client campaigns; an observer on a third member sees the next leader once
// the lease's TTL runs out.
func etcdElectionFailover(dir string, ttl time.Duration) (time.Duration, error) {
	c, ctx, end, err := freshFor(dir, ttl, startEtcd)
	if err != nil {
		return 0, err
	}
	defer end()
	hc, hs, err := c.holderSession(ttl)
	if err != nil {
		return 0, err
	}
	if err := concurrency.NewElection(hs, "/el/c3").Campaign(ctx, "first"); err != nil {
		hc.Close()
		return 0, err
	}
	ws, err := concurrency.NewSession(c.clients[1], concurrency.WithTTL(int(ttl.Seconds())))
	if err != nil {
		hc.Close()
		return 0, err
	}
	defer ws.Orphan()
	obsSess, err := concurrency.NewSession(c.clients[2], concurrency.WithTTL(int(ttl.Seconds())))
	if err != nil {
		hc.Close()
		return 0, err
	}
	defer obsSess.Orphan()
	obs := concurrency.NewElection(obsSess, "/el/c3").Observe(ctx)
	var cur *clientv3.GetResponse
	select {
	case cur = <-obs:
	case <-ctx.Done():
		hc.Close()
		return 0, ctx.Err()
	}
	if len(cur.Kvs) == 0 || string(cur.Kvs[0].Value) != "first" {
		hc.Close()
		return 0, fmt.Errorf("observer saw %v first", cur.Kvs)
	}
	go concurrency.NewElection(ws, "/el/c3").Campaign(ctx, "second")
	time.Sleep(300 * time.Millisecond) // the second campaign is queued
	t0 := time.Now()
	hc.Close() // keepalives stop; the lease is not revoked
	for {
		select {
		case r, ok := <-obs:
			if !ok {
				return 0, errors.New("observe channel closed")
			}
			if len(r.Kvs) > 0 && string(r.Kvs[0].Value) == "second" {
				return time.Since(t0), nil
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}
