package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
)

// fencedResource is the shared thing locks protect: it rejects tokens lower
// than the highest it has seen (fencing, S2) and counts critical sections
// that overlap (mutual exclusion, S1). Both counters must stay at 0.
type fencedResource struct {
	mu       sync.Mutex
	highest  map[string]uint64
	inside   map[string]int
	overlaps atomic.Int64
	stale    atomic.Int64
	writes   atomic.Int64
}

func newFencedResource() *fencedResource {
	return &fencedResource{highest: map[string]uint64{}, inside: map[string]int{}}
}

func (r *fencedResource) enter(name string, token uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if token < r.highest[name] {
		r.stale.Add(1)
	}
	r.highest[name] = max(r.highest[name], token)
	r.inside[name]++
	if r.inside[name] > 1 {
		r.overlaps.Add(1)
	}
	r.writes.Add(1)
}

func (r *fencedResource) exit(name string) {
	r.mu.Lock()
	r.inside[name]--
	r.mu.Unlock()
}

// fifoChecker watches the applied log through a node's Observer and checks
// L2 and S2 there: per name, waiters are granted in the order their Queued
// results were applied, and grant tokens strictly increase.
type fifoChecker struct {
	mu         sync.Mutex
	queues     map[string][]uint64 // name -> queued (session<<20 | seq) keys in enqueue order
	lastToken  map[string]uint64
	violations []string
	grants     int
	fromQueue  int
}

func newFIFOChecker() *fifoChecker {
	return &fifoChecker{queues: map[string][]uint64{}, lastToken: map[string]uint64{}}
}

func waitKey(session, seq uint64) uint64 { return session<<24 | seq }

func (c *fifoChecker) observe(rec ApplyRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cmd := rec.Command
	if cmd.Kind == lockfsm.KindAcquire && rec.Result.Err == nil && !rec.Result.Duplicate && rec.Result.Status == lockfsm.Queued {
		c.queues[cmd.Name] = append(c.queues[cmd.Name], waitKey(cmd.Session, cmd.Seq))
	}
	for _, ev := range rec.Events {
		switch ev.Kind {
		case lockfsm.EventGranted:
			c.grants++
			if ev.Token <= c.lastToken[ev.Name] {
				c.violations = append(c.violations, fmt.Sprintf("%s: token %d after %d", ev.Name, ev.Token, c.lastToken[ev.Name]))
			}
			c.lastToken[ev.Name] = ev.Token
			if ev.FromQueue {
				c.fromQueue++
				q := c.queues[ev.Name]
				k := waitKey(ev.Session, ev.Seq)
				if len(q) == 0 || q[0] != k {
					c.violations = append(c.violations, fmt.Sprintf("%s: granted %x out of FIFO order (queue %x)", ev.Name, k, q))
				}
				c.remove(ev.Name, k)
			}
		case lockfsm.EventWaitEnded:
			c.remove(ev.Name, waitKey(ev.Session, ev.Seq))
		}
	}
}

func (c *fifoChecker) remove(name string, k uint64) {
	q := c.queues[name]
	for i, x := range q {
		if x == k {
			c.queues[name] = append(q[:i:i], q[i+1:]...)
			return
		}
	}
}

// TestMutualExclusionAndFIFOUnderContention: 32 goroutines spread over 3
// nodes fight for 2 names for a few seconds. The fenced resource sees no
// overlap and no stale token (S1, S2); the applied log grants waiters in
// enqueue order (L2); some goroutines re-enter with an explicit owner and
// their hold counts come out right.
func TestMutualExclusionAndFIFOUnderContention(t *testing.T) {
	fifo := newFIFOChecker()
	tc := newCluster(t, 3, func(c *Config) {
		if c.ID == 1 {
			c.Observer = fifo.observe
		}
	})
	leader(t, tc)
	res := newFencedResource()
	names := []string{"hot/a", "hot/b"}
	duration := 3 * time.Second
	if testing.Short() {
		duration = time.Second
	}
	deadline := time.Now().Add(duration)
	var ops, reentered atomic.Int64
	errc := make(chan error, 64)
	contend(t, tc.Member, 32, func(g int, n *Node, rng *rand.Rand) {
		for time.Now().Before(deadline) {
			name := names[rng.IntN(len(names))]
			owner := fmt.Sprintf("g%d-%d", g, ops.Add(1))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			h, err := n.Acquire(ctx, name, owner, true, 0)
			if err != nil {
				cancel()
				errc <- fmt.Errorf("acquire %s: %w", name, err)
				return
			}
			res.enter(name, h.Token())
			if g%4 == 0 {
				// Re-enter with the same owner: same token, no waiting.
				h2, err := n.Acquire(ctx, name, owner, true, 0)
				if err != nil || h2.Token() != h.Token() {
					errc <- fmt.Errorf("reentry: %v token %d vs %d", err, tokenOf(h2), h.Token())
					cancel()
					return
				}
				require.NoError(t, h2.Release(ctx))
				if h.Context().Err() != nil {
					errc <- errors.New("first hold lost after releasing the nested one")
				}
				reentered.Add(1)
			}
			res.exit(name)
			if err := h.Release(ctx); err != nil {
				errc <- fmt.Errorf("release: %w", err)
			}
			cancel()
		}
	})
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	require.Zero(t, res.overlaps.Load(), "overlapping critical sections")
	require.Zero(t, res.stale.Load(), "stale tokens accepted")
	fifo.mu.Lock()
	defer fifo.mu.Unlock()
	require.Empty(t, fifo.violations)
	t.Logf("%d critical sections, %d reentries, %d grants (%d from the queue)", res.writes.Load(), reentered.Load(), fifo.grants, fifo.fromQueue)
	require.Greater(t, fifo.fromQueue, 10, "the test must actually exercise queueing")
	require.Positive(t, reentered.Load())
}

// contend runs body on goroutines goroutines at once and waits for them:
// goroutine g on node g%3+1 of a 3-node cluster (member is its Member),
// with its own random source drawn from one seed, which it logs.
func contend(t *testing.T, member func(id uint64) *Node, goroutines int, body func(g int, n *Node, rng *rand.Rand)) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		n := member(uint64(g%3 + 1))
		rng := rand.New(rand.NewPCG(seed, uint64(g)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			body(g, n, rng)
		}()
	}
	wg.Wait()
}

func tokenOf(h *Hold) uint64 {
	if h == nil {
		return 0
	}
	return h.Token()
}

// TestFIFOCheckerCatchesReorder shows the FIFO check is not vacuous: a
// grant out of enqueue order is reported.
func TestFIFOCheckerCatchesReorder(t *testing.T) {
	c := newFIFOChecker()
	q := func(idx, seq uint64) {
		c.observe(ApplyRecord{Index: idx, Command: &lockfsm.Command{Kind: lockfsm.KindAcquire, Name: "x", Session: 1, Seq: seq},
			Result: lockfsm.Result{Status: lockfsm.Queued}})
	}
	q(10, 1)
	q(11, 2)
	c.observe(ApplyRecord{Index: 12, Command: &lockfsm.Command{Kind: lockfsm.KindRelease},
		Events: []lockfsm.Event{{Kind: lockfsm.EventGranted, Name: "x", Session: 1, Seq: 2, Token: 12, FromQueue: true}}})
	require.Len(t, c.violations, 1)
	c.observe(ApplyRecord{Index: 13, Command: &lockfsm.Command{Kind: lockfsm.KindRelease},
		Events: []lockfsm.Event{{Kind: lockfsm.EventGranted, Name: "x", Session: 1, Seq: 1, Token: 12, FromQueue: true}}})
	require.Len(t, c.violations, 2, "a token that does not increase is reported")
}

// TestLockOnFollowerAndTryLock: a follower grants like the leader; TryLock
// never queues and reports lockerr.ErrLocked at once.
func TestLockOnFollowerAndTryLock(t *testing.T) {
	tc := newCluster(t, 3)
	f := tc.Member(follower(t, tc))
	lead := tc.Member(leader(t, tc))
	ctx := ctxT(t, 10*time.Second)
	h, err := f.Acquire(ctx, "job/nightly", "f-owner", true, 0)
	require.NoError(t, err)
	_, err = lead.Acquire(ctx, "job/nightly", "other", false, 0)
	require.ErrorIs(t, err, lockerr.ErrLocked)
	require.Contains(t, err.Error(), "f-owner", "lockerr.ErrLocked names the holder")
	// TryLock left no waiter behind, on any replica.
	for _, n := range tc.All() {
		requireWaiters(t, n, "job/nightly", 0)
	}
	require.NoError(t, h.Release(ctx))
	h2, err := lead.Acquire(ctx, "job/nightly", "other", false, 0)
	require.NoError(t, err)
	require.Greater(t, h2.Token(), h.Token())
}

func requireWaiters(t *testing.T, n *Node, name string, want int) {
	t.Helper()
	require.Eventually(t, func() bool {
		locks, err := n.Locks(context.Background())
		require.NoError(t, err)
		for _, l := range locks {
			if l.Name == name {
				return len(l.Waiters) == want
			}
		}
		return want == 0
	}, 5*time.Second, 5*time.Millisecond)
}

// TestCancelledLockLeavesNothing (S4): a Lock whose context ends while it
// waits leaves no waiter; the next Lock by someone else after the holder
// releases is granted at once.
func TestCancelledLockLeavesNothing(t *testing.T) {
	tc := newCluster(t, 3)
	leader(t, tc)
	ctx := ctxT(t, 10*time.Second)
	a, b, c := tc.Member(1), tc.Member(2), tc.Member(3)
	h, err := a.Acquire(ctx, "r", "holder", true, 0)
	require.NoError(t, err)
	for i := 0; i < 5; i++ {
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err = b.Acquire(wctx, "r", fmt.Sprintf("impatient-%d", i), true, 0)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
	for _, n := range tc.All() {
		requireWaiters(t, n, "r", 0)
	}
	require.NoError(t, h.Release(ctx))
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	h3, err := c.Acquire(tctx, "r", "next", false, 0)
	require.NoError(t, err, "TryLock right after the release must succeed: nothing may be left queued")
	require.NoError(t, h3.Release(ctx))
}

// TestCancelRacingGrantLeavesNothing: many waiters give up at random
// moments while the lock is handed around; whatever the interleaving, no
// abandoned call ends up holding the lock. A final TryLock must succeed.
func TestCancelRacingGrantLeavesNothing(t *testing.T) {
	tc := newCluster(t, 3)
	leader(t, tc)
	var granted, gaveUp atomic.Int64
	contend(t, tc.Member, 12, func(g int, n *Node, rng *rand.Rand) {
		for i := 0; i < 15; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(30))*time.Millisecond)
			h, err := n.Acquire(ctx, "contended", fmt.Sprintf("g%d-%d", g, i), true, 0)
			cancel()
			if err != nil {
				gaveUp.Add(1)
				continue
			}
			granted.Add(1)
			time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond) // hold it a little: the critical section
			require.NoError(t, h.Release(context.Background()))
		}
	})
	t.Logf("granted %d, gave up %d", granted.Load(), gaveUp.Load())
	require.Positive(t, gaveUp.Load())
	ctx := ctxT(t, 5*time.Second)
	for _, n := range tc.All() {
		requireWaiters(t, n, "contended", 0)
	}
	var h *Hold
	defer func() {
		if t.Failed() {
			locks, _ := tc.Member(1).Locks(context.Background())
			t.Logf("lock table: %+v", locks)
		}
	}()
	require.Eventually(t, func() bool {
		var err error
		h, err = tc.Member(1).Acquire(ctx, "contended", "final", false, 0)
		return err == nil
	}, 5*time.Second, 10*time.Millisecond, "an abandoned Lock was left holding the name")
	require.NoError(t, h.Release(ctx))
}
