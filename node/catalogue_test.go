package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
)

// Tests of the lock catalogue on real 3-node clusters (real gRPC on
// loopback, real bbolt files): read-write locks, semaphores, elections and
// multi-name locks, each traced to the promise it shows.

func rwReq(name, owner string, shared, wait bool) Request {
	return Request{Name: name, Owner: owner, Wait: wait, Primitive: lockfsm.PrimRW, Shared: shared}
}

func semReq(name, owner string, k, size uint32, wait bool) Request {
	return Request{Name: name, Owner: owner, Wait: wait, Primitive: lockfsm.PrimSemaphore, Permits: k, Limit: size}
}

func campaignReq(name, owner, value string) Request {
	return Request{Name: name, Owner: owner, Wait: true, Primitive: lockfsm.PrimElection, Value: value}
}

func multiReq(owner string, wait bool, names ...string) Request {
	return Request{Name: names[0], ExtraNames: names[1:], Owner: owner, Wait: wait}
}

// pending is an acquisition running in the background.
type pending struct {
	h   *Hold
	err error
	ch  chan struct{}
}

func acquireAsync(ctx context.Context, n *Node, r Request) *pending {
	p := &pending{ch: make(chan struct{})}
	go func() {
		defer close(p.ch)
		p.h, p.err = n.AcquireWith(ctx, r)
	}()
	return p
}

func (p *pending) done() bool {
	select {
	case <-p.ch:
		return true
	default:
		return false
	}
}

func (p *pending) wait(t *testing.T) *Hold {
	t.Helper()
	select {
	case <-p.ch:
	case <-time.After(15 * time.Second):
		t.Fatal("acquisition not granted in 15 s")
	}
	require.NoError(t, p.err)
	return p.h
}

func lockInfo(t *testing.T, n *Node, name string) lockfsm.LockInfo {
	t.Helper()
	locks, err := n.Locks(context.Background())
	require.NoError(t, err)
	for _, l := range locks {
		if l.Name == name {
			return l
		}
	}
	return lockfsm.LockInfo{Name: name}
}

// proposed is the next sequence number n's session gives a command: it
// moves exactly when n proposes one of its callers' commands (unlike the
// applied index, which background entries such as keepalive checkpoints
// move too).
func proposed(t *testing.T, n *Node) uint64 {
	t.Helper()
	ch := make(chan uint64, 1)
	require.NoError(t, n.do(context.Background(), func() { ch <- n.loop.ops.nextSeq }))
	return <-ch
}

func applied(t *testing.T, n *Node) uint64 {
	t.Helper()
	st, err := n.Status(context.Background())
	require.NoError(t, err)
	return st.Applied
}

// TestRWLock (S1, S2, L2): readers on different nodes share the lock; a
// writer waits for them; a reader that comes after a waiting writer waits
// too (a try fails: no barging); the writer's token is above every reader's;
// readers queued behind the writer are granted together when it releases,
// with one token; the writer may take the read side at once (downgrade); a
// reader's write request is refused (lockerr.ErrUpgrade); other kinds on the name
// are refused (lockerr.ErrWrongKind) and change nothing.
func TestRWLock(t *testing.T) {
	_, ctx, n1, n2, n3 := trio(t)

	r1, err := n1.AcquireWith(ctx, rwReq("rw", "r1", true, true))
	require.NoError(t, err)
	r2, err := n2.AcquireWith(ctx, rwReq("rw", "r2", true, false))
	require.NoError(t, err, "a second reader shares the lock (try)")
	require.True(t, r1.Shared())
	require.Greater(t, r2.Token(), r1.Token())
	r1again, err := n1.AcquireWith(ctx, rwReq("rw", "r1", true, true))
	require.NoError(t, err, "reentrant read")
	require.Equal(t, r1.Token(), r1again.Token())

	_, err = n3.AcquireWith(ctx, rwReq("rw", "w-try", false, false))
	require.ErrorIs(t, err, lockerr.ErrLocked, "a writer's try while readers hold")
	w := acquireAsync(ctx, n3, rwReq("rw", "w", false, true))
	requireWaiters(t, n1, "rw", 1)
	_, err = n1.AcquireWith(ctx, rwReq("rw", "late-reader", true, false))
	require.ErrorIs(t, err, lockerr.ErrLocked, "a reader after a waiting writer must not barge")
	late := acquireAsync(ctx, n2, rwReq("rw", "late", true, true))
	late2 := acquireAsync(ctx, n1, rwReq("rw", "late2", true, true))
	requireWaiters(t, n1, "rw", 3)

	require.NoError(t, r1again.Release(ctx))
	require.NoError(t, r1.Release(ctx))
	require.False(t, w.done(), "the writer waits for the second reader")
	require.NoError(t, r2.Release(ctx))
	wh := w.wait(t)
	require.Greater(t, wh.Token(), r2.Token(), "S2: the writer is fenced above every reader")
	require.False(t, late.done() || late2.done(), "readers behind the writer wait")
	require.Equal(t, 1, len(lockInfo(t, n3, "rw").Holds), "the writer alone")

	// Downgrade: the writer's read request is granted at once, ahead of the
	// queued readers; then it releases the write side and the queued
	// readers join it, in one entry, with one token.
	wr, err := n3.AcquireWith(ctx, rwReq("rw", "w", true, true))
	require.NoError(t, err)
	require.NoError(t, wh.Release(ctx))
	lh, l2h := late.wait(t), late2.wait(t)
	require.Equal(t, lh.Token(), l2h.Token(), "readers granted in one entry share a token")
	require.Greater(t, lh.Token(), wh.Token())
	require.NoError(t, wr.Context().Err(), "the downgraded read side stays")
	require.Len(t, lockInfo(t, n1, "rw").Holds, 3)

	// Upgrade refused, try and wait.
	_, err = n2.AcquireWith(ctx, rwReq("rw", "late", false, false))
	require.ErrorIs(t, err, lockerr.ErrUpgrade)
	_, err = n2.AcquireWith(ctx, rwReq("rw", "late", false, true))
	require.ErrorIs(t, err, lockerr.ErrUpgrade)

	// Other kinds on a read-write name.
	before := proposed(t, n1)
	_, err = n1.Acquire(ctx, "rw", "mutex", false, 0)
	require.ErrorIs(t, err, lockerr.ErrWrongKind)
	_, err = n1.AcquireWith(ctx, semReq("rw", "sem", 1, 2, false))
	require.ErrorIs(t, err, lockerr.ErrWrongKind)
	require.Greater(t, proposed(t, n1), before, "the cluster refused them (proposed, nothing changed)")
	require.Len(t, lockInfo(t, n1, "rw").Holds, 3, "nothing changed")

	for _, h := range []*Hold{wr, lh, l2h} {
		require.NoError(t, h.Release(ctx))
		require.ErrorIs(t, h.Release(ctx), lockerr.ErrNotHeld)
	}
	h, err := n1.Acquire(ctx, "rw", "mutex-now", false, 0)
	require.NoError(t, err, "a free name is forgotten: any kind may take it")
	require.NoError(t, h.Release(ctx))
}

// TestSemaphore (S1, L2): N permits; a try never queues; the head asking for
// k is not overtaken by a later smaller request when fewer than k free;
// requests granted in one entry share a token; another size is refused
// (lockerr.ErrPermitsMismatch), as is bad input before anything is proposed
// (lockerr.ErrBadPermits).
func TestSemaphore(t *testing.T) {
	_, ctx, n1, n2, n3 := trio(t)

	a, err := n1.AcquireWith(ctx, semReq("pool", "a", 2, 3, true))
	require.NoError(t, err)
	require.EqualValues(t, 2, a.Permits())
	b, err := n2.AcquireWith(ctx, semReq("pool", "b", 1, 3, false))
	require.NoError(t, err)
	li := lockInfo(t, n2, "pool") // n2 applied both grants before b returned
	require.EqualValues(t, 3, li.PermitsInUse)
	require.EqualValues(t, 3, li.Permits)
	_, err = n3.AcquireWith(ctx, semReq("pool", "c", 1, 3, false))
	require.ErrorIs(t, err, lockerr.ErrLocked, "no permit free: a try fails")

	d := acquireAsync(ctx, n3, semReq("pool", "d", 2, 3, true))
	requireWaiters(t, n1, "pool", 1)
	e := acquireAsync(ctx, n1, semReq("pool", "e", 1, 3, true))
	requireWaiters(t, n1, "pool", 2)
	require.NoError(t, b.Release(ctx))
	// One permit is free, the head wants two: the later request for one
	// must not overtake it. Wait for the release to be applied everywhere.
	require.Eventually(t, func() bool { return lockInfo(t, n2, "pool").PermitsInUse == 2 }, 5*time.Second, 5*time.Millisecond)
	requireWaiters(t, n2, "pool", 2)
	require.False(t, d.done() || e.done())
	_, err = n2.AcquireWith(ctx, semReq("pool", "f", 1, 3, false))
	require.ErrorIs(t, err, lockerr.ErrLocked, "a try does not overtake the queue either")

	require.NoError(t, a.Release(ctx))
	dh, eh := d.wait(t), e.wait(t)
	require.Equal(t, dh.Token(), eh.Token(), "granted in one entry: one token")
	require.Greater(t, dh.Token(), a.Token())

	_, err = n2.AcquireWith(ctx, semReq("pool", "g", 1, 4, false))
	require.ErrorIs(t, err, lockerr.ErrPermitsMismatch)
	_, err = n3.AcquireWith(ctx, semReq("pool", "d", 2, 3, false))
	require.ErrorIs(t, err, lockerr.ErrHoldConflict, "d would wait for its own permits")
	_, err = n1.Acquire(ctx, "pool", "m", false, 0)
	require.ErrorIs(t, err, lockerr.ErrWrongKind)

	before := proposed(t, n1)
	for _, r := range []Request{semReq("x", "o", 0, 3, true), semReq("x", "o", 4, 3, true),
		semReq("x", "o", 1, 0, true), semReq("x", "o", 1, MaxPermits+1, true)} {
		_, err := n1.AcquireWith(ctx, r)
		require.ErrorIs(t, err, lockerr.ErrBadPermits, "%d of %d", r.Permits, r.Limit)
	}
	require.Equal(t, before, proposed(t, n1), "bad input: nothing proposed")

	require.NoError(t, dh.Release(ctx))
	require.NoError(t, eh.Release(ctx))
	require.Eventually(t, func() bool { _, ok := lockFound(n1, "pool"); return !ok }, 5*time.Second, 5*time.Millisecond)
}

func lockFound(n *Node, name string) (lockfsm.LockInfo, bool) {
	locks, err := n.Locks(context.Background())
	if err != nil {
		return lockfsm.LockInfo{}, false
	}
	for _, l := range locks {
		if l.Name == name {
			return l, true
		}
	}
	return lockfsm.LockInfo{}, false
}

// TestSemaphoreLeasePerPermit (S5, and the leader's lease timers keyed by
// holder): two permits granted in one entry share a token, each with its own
// lease. One is renewed, the other not: only the unrenewed one expires (its
// Context first, then the cluster takes its permit back), the renewed one
// stays.
func TestSemaphoreLeasePerPermit(t *testing.T) {
	_, ctx, n1, n2, n3 := trio(t)
	h, err := n1.AcquireWith(ctx, semReq("lp", "h", 2, 2, true))
	require.NoError(t, err)
	lease := 800 * time.Millisecond
	xr, yr := semReq("lp", "x", 1, 2, true), semReq("lp", "y", 1, 2, true)
	xr.Lease, yr.Lease = lease, lease
	x := acquireAsync(ctx, n2, xr)
	requireWaiters(t, n1, "lp", 1)
	y := acquireAsync(ctx, n3, yr)
	requireWaiters(t, n1, "lp", 2)
	require.NoError(t, h.Release(ctx))
	xh, yh := x.wait(t), y.wait(t)
	require.Equal(t, xh.Token(), yh.Token(), "one entry, one token")
	stop := make(chan struct{})
	var renewErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(lease / 5)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			rctx, cancel := context.WithTimeout(ctx, lease/2)
			err := yh.Renew(rctx)
			cancel()
			if err != nil && !errors.Is(err, lockerr.ErrUnavailable) {
				renewErr = err
				return
			}
		}
	}()
	select {
	case <-xh.Context().Done():
	case <-ctx.Done():
		t.Fatal("the unrenewed permit's lease never ended")
	}
	require.ErrorIs(t, context.Cause(xh.Context()), lockerr.ErrLeaseExpired)
	require.Eventually(t, func() bool { return lockInfo(t, n1, "lp").PermitsInUse == 1 }, 5*time.Second, 5*time.Millisecond,
		"the cluster takes the expired permit back")
	// The renewed one outlives several of its lease periods.
	time.Sleep(3 * lease)
	close(stop)
	wg.Wait()
	require.NoError(t, renewErr)
	require.NoError(t, yh.Context().Err(), "the renewed permit that shares the token stays held")
	li := lockInfo(t, n1, "lp")
	require.Len(t, li.Holds, 1)
	require.Equal(t, "y", li.Holds[0].Owner)
	z, err := n1.AcquireWith(ctx, semReq("lp", "z", 1, 2, false))
	require.NoError(t, err, "the expired permit is free again")
	require.NoError(t, z.Release(ctx))
	require.NoError(t, yh.Release(ctx))
}

// leaderLog records every EventLeader one node applies (its Observer).
type leaderLog struct {
	mu      sync.Mutex
	changes []LeaderChange
}

func (l *leaderLog) observe(r ApplyRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range r.Events {
		if e.Kind == lockfsm.EventLeader {
			l.changes = append(l.changes, LeaderChange{Name: e.Name, Index: r.Index, Session: e.Session,
				Owner: e.Owner, Token: e.Token, Value: e.Value})
		}
	}
}

func (l *leaderLog) of(name string, after uint64) []LeaderChange {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []LeaderChange
	for _, c := range l.changes {
		if c.Name == name && c.Index > after {
			out = append(out, c)
		}
	}
	return out
}

// collect sends the changes o yields to out, and closes out when the
// observation ends.
func collect(ctx context.Context, o *Observer, out chan<- LeaderChange) {
	for {
		c, err := o.Next(ctx)
		if err != nil {
			close(out)
			return
		}
		out <- c
	}
}

// proclaimUnsure proclaims value within 3 s; a failure is logged, not
// fatal: its outcome is unknown, and the test checks what was applied.
func proclaimUnsure(t *testing.T, ctx context.Context, h *Hold, value string) {
	t.Helper()
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := h.Proclaim(pctx, value); err != nil {
		t.Logf("proclaim %s: %v (outcome unknown)", value, err)
	}
}

// observeChanges observes name on n. The changes come on the returned
// channel, which is closed when the observation ends (collect).
func observeChanges(t *testing.T, ctx context.Context, n *Node, name string) (*Observer, <-chan LeaderChange) {
	t.Helper()
	o, err := n.Observe(ctx, name)
	require.NoError(t, err)
	ch := make(chan LeaderChange, 1024)
	go collect(ctx, o, ch)
	return o, ch
}

// changesUntil takes the changes from ch up to the first for which last is
// true, that one included.
func changesUntil(t *testing.T, ch <-chan LeaderChange, last func(LeaderChange) bool) []LeaderChange {
	t.Helper()
	var seen []LeaderChange
	for {
		c := nextChange(t, ch)
		seen = append(seen, c)
		if last(c) {
			return seen
		}
	}
}

func nextChange(t *testing.T, ch <-chan LeaderChange) LeaderChange {
	t.Helper()
	select {
	case c, ok := <-ch:
		require.True(t, ok, "observation ended")
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no change observed in 10 s")
	}
	return LeaderChange{}
}

// TestElection (S1, S2, S5, and Observe): a campaign blocks until it leads;
// the leader's token is its term, strictly increasing; Proclaim changes its
// value; Resign hands over to the next campaigner in the same entry; a
// campaign by the leader itself is refused. Observers on another node get
// the current leader first, then every change in log order, exactly the
// changes the log applied.
func TestElection(t *testing.T) {
	var log leaderLog
	_, ctx, n1, n2, n3 := trio(t, func(c *Config) {
		if c.ID == 2 {
			c.Observer = log.observe
		}
	})

	o, ch := observeChanges(t, ctx, n3, "leader")
	var seen []LeaderChange
	next := func() LeaderChange {
		t.Helper()
		c := nextChange(t, ch)
		seen = append(seen, c)
		return c
	}
	first := next()
	require.False(t, first.leading(), "nobody leads yet: %v", first)

	l1, err := n1.AcquireWith(ctx, campaignReq("leader", "n1", "addr-1"))
	require.NoError(t, err)
	c := next()
	require.Equal(t, LeaderChange{Name: "leader", Index: l1.Token(), Session: c.Session, Owner: "n1", Token: l1.Token(), Value: "addr-1"}, c)
	_, err = n1.AcquireWith(ctx, campaignReq("leader", "n1", "again"))
	require.ErrorIs(t, err, lockerr.ErrHoldConflict, "the leader campaigning again")

	p2 := acquireAsync(ctx, n2, campaignReq("leader", "n2", "addr-2"))
	requireWaiters(t, n1, "leader", 1)
	require.NoError(t, l1.Proclaim(ctx, "addr-1b"))
	c = next()
	require.Equal(t, "addr-1b", c.Value)
	require.Equal(t, l1.Token(), c.Token)
	require.NoError(t, l1.Proclaim(ctx, "addr-1b"), "the same value again: no change")

	// A second observer, started now on a follower, gets the current
	// leader as that follower has applied it first: n2 may not have
	// applied the Proclaim yet (it returned once n1 applied it), and then
	// the change follows; nothing is missed either way.
	o2, err := n2.Observe(ctx, "leader")
	require.NoError(t, err)
	c2, err := o2.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, "n1", c2.Owner)
	if c2.Value == "addr-1" {
		c2, err = o2.Next(ctx)
		require.NoError(t, err)
		require.Equal(t, "n1", c2.Owner)
	}
	require.Equal(t, "addr-1b", c2.Value)
	require.Equal(t, l1.Token(), c2.Token)
	o2.Close()

	require.NoError(t, l1.Release(ctx)) // resign
	require.ErrorIs(t, context.Cause(l1.Context()), lockerr.ErrReleased)
	require.ErrorIs(t, l1.Proclaim(ctx, "late"), lockerr.ErrNotHeld)
	l2 := p2.wait(t)
	require.Greater(t, l2.Token(), l1.Token(), "S2: terms strictly increase")
	c = next()
	require.Equal(t, "n2", c.Owner)
	require.Equal(t, l2.Token(), c.Token)
	require.Equal(t, "addr-2", c.Value)
	require.NoError(t, l2.Release(ctx))
	c = next()
	require.False(t, c.leading())

	_, err = n1.AcquireWith(ctx, campaignReq("leader", "x", strings.Repeat("v", MaxValueLen+1)))
	require.ErrorIs(t, err, lockerr.ErrInvalidValue)

	// What the observer got is exactly what the log applied (on another
	// replica), after its first item.
	o.Close()
	for c := range ch {
		seen = append(seen, c)
	}
	require.Equal(t, log.of("leader", first.Index), seen[1:])
}

// TestMultiNameLock (S1, L2, no deadlock): a multi-name lock takes all its
// names in one entry or none; it waits FIFO on every name, holding nothing
// meanwhile, and while it heads a queue later requests on that name wait
// behind it even when the name is free; opposite orders never deadlock;
// bad input is refused before anything is proposed.
func TestMultiNameLock(t *testing.T) {
	tc, ctx, n1, n2, n3 := trio(t)

	b, err := n1.Acquire(ctx, "b", "holder-b", true, 0)
	require.NoError(t, err)
	_, err = n2.AcquireWith(ctx, multiReq("try", false, "a", "b", "c"))
	require.ErrorIs(t, err, lockerr.ErrLocked, "a try takes none when one name is held")
	require.Empty(t, lockInfo(t, n2, "a").Holds, "none taken")

	abc := acquireAsync(ctx, n2, multiReq("abc", true, "a", "b", "c"))
	requireWaiters(t, n1, "a", 1)
	requireWaiters(t, n1, "c", 1)
	require.Empty(t, lockInfo(t, n1, "a").Holds, "a waiting multi-name lock holds nothing")
	// a is free but the multi-name waiter heads its queue: no barging.
	_, err = n3.Acquire(ctx, "a", "barger", false, 0)
	require.ErrorIs(t, err, lockerr.ErrLocked)
	single := acquireAsync(ctx, n3, Request{Name: "a", Owner: "single", Wait: true})
	requireWaiters(t, n1, "a", 2)

	require.NoError(t, b.Release(ctx))
	g := abc.wait(t)
	require.Equal(t, []string{"a", "b", "c"}, g.Names())
	for _, name := range []string{"a", "b", "c"} {
		li := lockInfo(t, n2, name) // n2 applied the grant before handing it out
		require.Len(t, li.Holds, 1, name)
		require.Equal(t, "abc", li.Holds[0].Owner, name)
		require.Equal(t, g.Token(), li.Holds[0].Token, "one token on every name")
	}
	require.Greater(t, g.Token(), b.Token())
	require.False(t, single.done(), "the single waiter on a is behind the group")
	_, err = n2.Acquire(ctx, "b", "abc", false, 0)
	require.ErrorIs(t, err, lockerr.ErrHoldConflict, "a name held as part of a group, singly")
	again, err := n2.AcquireWith(ctx, multiReq("abc", true, "c", "a", "b"))
	require.NoError(t, err, "the same set again, any order: reentrant")
	require.Equal(t, g.Token(), again.Token())
	require.NoError(t, again.Release(ctx))
	require.NoError(t, g.Release(ctx))
	s := single.wait(t)
	require.Greater(t, s.Token(), g.Token())
	require.NoError(t, s.Release(ctx))

	// Opposite orders under contention: all granted, never a deadlock.
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := 0; i < 20; i++ {
		n := tc.Member(uint64(i%3 + 1))
		names := []string{"x", "y", "z"}
		if i%2 == 1 {
			names = []string{"z", "y", "x"}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := n.AcquireWith(ctx, multiReq(fmt.Sprintf("o%d", i), true, names...))
			if err != nil {
				errs <- err
				return
			}
			errs <- h.Release(ctx)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	before := proposed(t, n1)
	many := make([]string, MaxMultiNames+1)
	for i := range many {
		many[i] = fmt.Sprintf("m%d", i)
	}
	_, err = n1.AcquireWith(ctx, multiReq("o", true, many...))
	require.ErrorIs(t, err, lockerr.ErrTooManyNames)
	_, err = n1.AcquireWith(ctx, multiReq("o", true, "p", "q", "p"))
	require.ErrorIs(t, err, lockerr.ErrDuplicateName)
	_, err = n1.AcquireWith(ctx, multiReq("o", true, "p", ""))
	require.ErrorIs(t, err, lockerr.ErrInvalidName)
	require.Equal(t, before, proposed(t, n1), "bad input: nothing proposed")

	sem, err := n1.AcquireWith(ctx, semReq("s", "o", 1, 2, true))
	require.NoError(t, err)
	_, err = n1.AcquireWith(ctx, multiReq("o2", false, "p", "s"))
	require.ErrorIs(t, err, lockerr.ErrWrongKind, "a multi-name lock naming a semaphore")
	require.Empty(t, lockInfo(t, n1, "p").Holds, "nothing changed")
	require.NoError(t, sem.Release(ctx))
}

// TestCatalogueCancelLeavesNothing (S4): for every kind, calls that give up
// at random moments while the lock is handed around (grants racing the
// cancellation) leave nothing behind: at the end every name is free.
func TestCatalogueCancelLeavesNothing(t *testing.T) {
	tc := newCluster(t, 3)
	leader(t, tc)
	kinds := map[string]func(owner string) Request{
		"rw": func(o string) Request {
			return rwReq("c-rw", o, len(o)%2 == 0, true)
		},
		"sem": func(o string) Request { return semReq("c-sem", o, uint32(len(o)%2+1), 2, true) },
		"election": func(o string) Request {
			return campaignReq("c-el", o, o)
		},
		"multi": func(o string) Request {
			if len(o)%2 == 0 {
				return multiReq(o, true, "c-a", "c-b")
			}
			return Request{Name: "c-b", Owner: o, Wait: true}
		},
	}
	var wg sync.WaitGroup
	for kind, req := range kinds {
		for g := 0; g < 6; g++ {
			n := tc.Member(uint64(g%3 + 1))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 10; i++ {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration((g*7+i*13)%40)*time.Millisecond)
					h, err := n.AcquireWith(ctx, req(fmt.Sprintf("%s-g%d-%d%s", kind, g, i, strings.Repeat("x", i%2))))
					cancel()
					if err != nil {
						continue
					}
					time.Sleep(time.Millisecond)
					if err := h.Release(context.Background()); err != nil {
						t.Errorf("%s: release: %v", kind, err)
					}
				}
			}()
		}
	}
	wg.Wait()
	for _, n := range tc.All() {
		require.Eventually(t, func() bool {
			locks, err := n.Locks(context.Background())
			return err == nil && len(locks) == 0
		}, 10*time.Second, 10*time.Millisecond, "something was left behind on node %d", n.ID())
	}
}

// TestElectionHandsOverAfterLeaderCrash (L3, S5): the node of the
// election's leader crashes; the next campaigner, on another node, leads
// within the session TTL plus two election timeouts of the crash. Both when
// the crashed node was a raft follower and when it was the raft leader (then
// a raft failover comes first, and the new raft leader restarts every
// session deadline from its own first entry).
func TestElectionHandsOverAfterLeaderCrash(t *testing.T) {
	for _, raftLeader := range []bool{false, true} {
		t.Run(fmt.Sprintf("raft-leader=%v", raftLeader), func(t *testing.T) {
			tc := newCluster(t, 3)
			lead := leader(t, tc)
			ctx := ctxT(t, 30*time.Second)
			victim := follower(t, tc)
			if raftLeader {
				victim = lead
			}
			var next *Node
			for id, n := range tc.All() {
				if id != victim {
					next = n
				}
			}
			l, err := tc.Member(victim).AcquireWith(ctx, campaignReq("svc", "victim", "v"))
			require.NoError(t, err)
			require.Eventually(t, func() bool { return len(lockInfo(t, next, "svc").Holds) == 1 }, 5*time.Second,
				5*time.Millisecond, "next applied the campaign")
			o, err := next.Observe(ctx, "svc")
			require.NoError(t, err)
			p := acquireAsync(ctx, next, campaignReq("svc", "next", "n"))
			requireWaiters(t, next, "svc", 1)
			start := time.Now()
			tc.Crash(victim)
			h := p.wait(t)
			took := time.Since(start)
			cfg := next.cfg
			bound := cfg.SessionTTL + 2*cfg.electionTimeout()
			t.Logf("the next campaigner led %v after the leader's node crashed (TTL %v, bound %v)", took.Round(time.Millisecond),
				cfg.SessionTTL, bound)
			require.Less(t, took, bound+cfg.TickInterval*5, "L3: handover within the session TTL plus two election timeouts")
			require.Greater(t, h.Token(), l.Token())
			// The observer saw the victim lead, then the next campaigner,
			// with nobody in between (one entry hands over).
			c, err := o.Next(ctx)
			require.NoError(t, err)
			require.Equal(t, "victim", c.Owner)
			c, err = o.Next(ctx)
			require.NoError(t, err)
			require.Equal(t, "next", c.Owner)
			require.Equal(t, h.Token(), c.Token)
		})
	}
}

// TestObserveAcrossRaftFailover (Observe, L1): an observer on one node sees
// every change of an election exactly once and in order while the raft
// leader crashes and another takes over: exactly the changes another
// replica applied.
func TestObserveAcrossRaftFailover(t *testing.T) {
	logs := map[uint64]*leaderLog{1: {}, 2: {}, 3: {}}
	tc := newCluster(t, 3, func(c *Config) { c.Observer = logs[c.ID].observe })
	lead := leader(t, tc)
	ctx := ctxT(t, 60*time.Second)
	var watcher, speaker *Node
	for id, n := range tc.All() {
		switch {
		case id == lead:
		case watcher == nil:
			watcher = n
		default:
			speaker = n
		}
	}
	_, ch := observeChanges(t, ctx, watcher, "fo")
	first := nextChange(t, ch)
	l, err := speaker.AcquireWith(ctx, campaignReq("fo", "speaker", "v0"))
	require.NoError(t, err)
	crashed := false
	for i := 1; i <= 40; i++ {
		if i == 15 {
			tc.Crash(lead)
			crashed = true
		}
		proclaimUnsure(t, ctx, l, fmt.Sprintf("v%d", i))
	}
	require.True(t, crashed)
	require.NoError(t, l.Release(ctx))
	// The resign is the last change: wait for it, then stop observing.
	seen := changesUntil(t, ch, func(c LeaderChange) bool { return !c.leading() })
	want := logs[speaker.ID()].of("fo", first.Index)
	require.Equal(t, want, seen, "observed on node %d vs applied on node %d", watcher.ID(), speaker.ID())
	require.Greater(t, len(seen), 30, "the proclaims were observed")
	t.Logf("%d changes observed across the failover of node %d", len(seen), lead)
}

// TestMultiNameReentrantOtherOrder (S5, leases): a multi-name lock taken
// again by its owner with its names in another order is the same hold: one
// token, one lease. Renewing through the second handle keeps the group's
// lease alive on the leader, and both handles stay live; when the group is
// released, both are told.
func TestMultiNameReentrantOtherOrder(t *testing.T) {
	tc := newCluster(t, 3)
	leader(t, tc)
	ctx := ctxT(t, 30*time.Second)
	n := tc.Member(follower(t, tc))
	lease := 800 * time.Millisecond
	r1 := multiReq("o", true, "ra", "rb", "rc")
	r1.Lease = lease
	h1, err := n.AcquireWith(ctx, r1)
	require.NoError(t, err)
	r2 := multiReq("o", true, "rc", "ra", "rb")
	r2.Lease = lease
	h2, err := n.AcquireWith(ctx, r2)
	require.NoError(t, err)
	require.Equal(t, h1.Token(), h2.Token())
	for end := time.Now().Add(3 * lease); time.Now().Before(end); time.Sleep(lease / 5) {
		rctx, cancel := context.WithTimeout(ctx, lease/2)
		err := h2.Renew(rctx)
		cancel()
		if !errors.Is(err, lockerr.ErrUnavailable) {
			require.NoError(t, err, "renewing through the handle that listed the names in another order")
		}
	}
	require.NoError(t, h1.Context().Err())
	require.NoError(t, h2.Context().Err())
	require.Len(t, lockInfo(t, n, "rb").Holds, 1, "the group is still held")
	require.NoError(t, h1.Release(ctx))
	require.NoError(t, h2.Context().Err(), "one level left")
	require.NoError(t, h2.Release(ctx))
	_, found := lockFound(n, "ra")
	require.False(t, found)
}
