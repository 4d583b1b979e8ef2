package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// Tests of S5 ("holder knows first") against the review's findings 2, 4, 5
// and the duplicate-leased-grant bullet of 11 (shared/review/safety-review.md).
// The wall-clock scenario itself, which needs a clock whose wall reading
// steps apart from its monotonic one, is chaos.TestS5WallStepDoesNotKeepHolderLive.

// hasMonotonic reports whether t carries a monotonic reading (Round(0)
// strips it).
func hasMonotonic(t time.Time) bool { return t != t.Round(0) }

// openSession makes sure n's session is open (a lock taken and released).
func openSession(t *testing.T, n *Node) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	h, err := n.Acquire(ctx, "warm-up", "w", true, 0)
	require.NoError(t, err)
	require.NoError(t, h.Release(ctx))
}

// inLoop runs f inside n's loop and waits for it.
func inLoop(t *testing.T, n *Node, f func()) {
	t.Helper()
	done := make(chan struct{})
	require.NoError(t, n.do(ctxT(t, 10*time.Second), func() { f(); close(done) }))
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not run the function")
	}
}

// TestS5HolderDeadlinesKeepMonotonicReading (S5, finding 2): the session and
// lease deadlines the holder compares keep the node clock's monotonic
// reading, so a wall-clock step moves neither. Deadlines stored as UnixNano
// and rebuilt with time.Unix have none: they are compared on the wall clock.
func TestS5HolderDeadlinesKeepMonotonicReading(t *testing.T) {
	tc := newCluster(t, 1)
	leader(t, tc)
	n := tc.Member(1)
	h, err := n.Acquire(ctxT(t, 10*time.Second), "leased", "o", true, 5*time.Second)
	require.NoError(t, err)
	sd, ld := n.holderDeadline(), h.leaseDeadline()
	t.Logf("session deadline %v\nlease deadline %v", sd, ld)
	require.True(t, hasMonotonic(sd), "the session deadline has no monotonic reading: it is compared on the wall clock")
	require.True(t, hasMonotonic(ld), "the lease deadline has no monotonic reading: it is compared on the wall clock")
}

// TestS5LateLeasedGrantNotHandedOutLive (S5, finding 4; was the review's
// TestReviewLateLeasedGrantIsLive): a Granted result that arrives after the
// holder-side lease deadline is never handed out as a live Hold.
//   - A retained Duplicate result (a light member's retry after its reply or
//     push was lost) for a grant the leader no longer holds: the renewal
//     that dates it fails, the call fails with lockerr.ErrLeaseExpired.
//   - A grant applied late (its lease counted from the Acquire's first send
//     has run out) of a lease the leader still runs: the renewal re-bases it
//     and the Hold is handed out with a deadline ahead of it.
func TestS5LateLeasedGrantNotHandedOutLive(t *testing.T) {
	tc := newCluster(t, 1)
	leader(t, tc)
	n := tc.Member(1)
	openSession(t, n)
	type handout struct {
		res      opResult
		live     bool
		deadline time.Time
		now      time.Time
	}
	// look reads the result if the loop already produced it (it is checked
	// there, before the next tick can cancel anything), else waits.
	look := func(o *op, done <-chan struct{}) handout {
		var out handout
		got := false
		inLoop(t, n, func() {
			select {
			case <-done:
				r := o.out
				out, got = handout{res: r, now: n.clock.Now()}, true
				if r.hold != nil {
					out.live, out.deadline = r.hold.Context().Err() == nil, r.hold.leaseDeadline()
				}
			default:
			}
		})
		if got {
			return out
		}
		select {
		case <-done:
			r := o.out
			out = handout{res: r, now: n.clock.Now()}
			if r.hold != nil {
				out.live, out.deadline = r.hold.Context().Err() == nil, r.hold.leaseDeadline()
			}
			return out
		case <-time.After(10 * time.Second):
			t.Fatal("no result")
			return out
		}
	}
	t.Run("duplicate-of-a-lost-grant", func(t *testing.T) {
		o := newCallerOp(lockfsm.Command{Kind: lockfsm.KindAcquire, Name: "x", Owner: "o", LeaseMillis: 300})
		done := o.done
		inLoop(t, n, func() {
			o.cmd.Session, o.cmd.Seq = n.loop.own.id, 1<<40
			o.hold = holdRequest{lease: 300 * time.Millisecond, sentAt: n.clock.Now().Add(-2 * time.Second)}
			n.onAcquireResult(o, lockfsm.Result{Status: lockfsm.Granted, Token: 5, Duplicate: true})
		})
		out := look(o, done)
		require.False(t, out.live, "hold handed out live although its lease deadline passed %v ago", out.now.Sub(out.deadline))
		require.ErrorIs(t, out.res.err, lockerr.ErrLeaseExpired)
	})
	t.Run("applied-after-its-lease-from-first-send", func(t *testing.T) {
		lease := time.Second
		o := newCallerOp(lockfsm.Command{Kind: lockfsm.KindAcquire, Name: "y", Owner: "o", Wait: true,
			LeaseMillis: uint64(lease.Milliseconds())})
		done := o.done
		inLoop(t, n, func() {
			o.hold = holdRequest{lease: lease, sentAt: n.clock.Now().Add(-2 * time.Second)}
			n.submit(o)
		})
		out := look(o, done)
		require.NoError(t, out.res.err)
		require.False(t, out.live && !out.deadline.After(out.now),
			"hold handed out live although its lease deadline passed %v ago", out.now.Sub(out.deadline))
		require.True(t, out.live, "a grant the leader still leases is handed out, re-based")
		t.Logf("handed out with %v of its lease left", out.deadline.Sub(out.now))
		require.NoError(t, out.res.hold.Release(ctxT(t, 5*time.Second)))
	})
}

// TestS5NoGrantHandedOutAfterSessionDeadline (S5, finding 4): a grant that
// reaches the holder after its session deadline (here a fwd-status answer
// handled by a loop that was stalled past the deadline) is not handed out
// live: the session is given up first.
func TestS5NoGrantHandedOutAfterSessionDeadline(t *testing.T) {
	tc := newCluster(t, 3)
	a := follower(t, tc)
	n := tc.Member(a)
	ctx := ctxT(t, 30*time.Second)
	h, err := n.Acquire(ctx, "held", "a", true, 0)
	require.NoError(t, err)
	sess := n.sess.Load()
	tc.CutOff(a)
	out := make(chan string, 1)
	require.NoError(t, n.do(ctx, func() {
		// The loop stalls here until the deadline has passed (read again
		// and again: a keepalive already on its way when the node was cut
		// off may still be acknowledged), then handles the answer.
		for !time.Now().After(n.holderDeadline().Add(50 * time.Millisecond)) {
			time.Sleep(5 * time.Millisecond)
		}
		o := newCallerOp(lockfsm.Command{Kind: lockfsm.KindAcquire, Name: "late", Owner: "a", Session: sess, Seq: 1 << 40})
		o.hold = holdRequest{sentAt: n.clock.Now()}
		done := o.done
		n.loop.ops.inflight[o.cmd.Seq] = o
		n.onFwdStatus(sess, []uint64{o.cmd.Seq}, []*transportpb.StatusFact{{State: transportpb.AcquireState_ACQUIRE_STATE_GRANTED, Token: 1 << 40}})
		delete(n.loop.ops.inflight, o.cmd.Seq)
		select {
		case <-done:
			if r := o.out; r.hold != nil && r.hold.Context().Err() == nil {
				out <- fmt.Sprintf("LIVE: hold handed out %v after the session deadline", n.clock.Now().Sub(n.holderDeadline()))
			} else {
				out <- fmt.Sprintf("refused: %v", o.out.err)
			}
		default:
			out <- "refused: no result"
		}
	}))
	var got string
	select {
	case got = <-out:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not run the answer")
	}
	t.Log(got)
	require.NotContains(t, got, "LIVE")
	<-h.Context().Done()
	require.ErrorIs(t, context.Cause(h.Context()), lockerr.ErrSessionExpired)
	tc.Heal()
	h2, err := n.Acquire(ctx, "after-heal", "a", true, 0)
	require.NoError(t, err, "the node opens a new session and serves again")
	require.NoError(t, h2.Release(ctx))
}

// TestS5OneHoldPerLeasedGrant (S5, finding 11): a light member that hears of
// one leased grant from the queue twice (a push and a fwd-status answer)
// makes one Hold, not a second one that outlives the first.
func TestS5OneHoldPerLeasedGrant(t *testing.T) {
	tc := newCluster(t, 1)
	leader(t, tc)
	n := tc.Member(1)
	openSession(t, n)
	var handles int
	inLoop(t, n, func() {
		sess := n.loop.own.id
		o := newCallerOp(lockfsm.Command{Kind: lockfsm.KindAcquire, Name: "q", Owner: "o", Wait: true, LeaseMillis: 2000,
			Session: sess, Seq: 1 << 40})
		o.hold = holdRequest{lease: 2 * time.Second, sentAt: n.clock.Now()}
		n.loop.ops.queued[o.cmd.Seq] = o
		n.onEvent(0, &lockfsm.Event{Kind: lockfsm.EventGranted, Session: sess, Seq: o.cmd.Seq, Name: "q", Owner: "o",
			Token: 7, FromQueue: true}) // the push
		n.onFwdStatus(sess, []uint64{o.cmd.Seq}, []*transportpb.StatusFact{{State: transportpb.AcquireState_ACQUIRE_STATE_GRANTED, Token: 7}}) // fwd-status
		if hl := n.loop.holds.held[holdKey{name: "q", owner: "o", token: 7}]; hl != nil {
			handles = len(hl.handles)
		}
	})
	require.Equal(t, 1, handles, "Holds made for one grant")
}

// TestS5HolderToldByDeadlineWhileLoopStalled (S5, finding 5): with the node
// loop stalled (Faults.PauseLoop: as a long synchronous disk write would;
// the keepalive sender runs on), a holder's Context still ends by its
// deadline, before the lock is granted elsewhere: for a session cut off from
// the leader, and for a lease that is not renewed. When the loop resumes it
// gives the session up (or drops the lease) and serves again.
func TestS5HolderToldByDeadlineWhileLoopStalled(t *testing.T) {
	for _, leased := range []bool{false, true} {
		name := map[bool]string{false: "session-cut-off", true: "lease-not-renewed"}[leased]
		t.Run(name, func(t *testing.T) {
			tc := newCluster(t, 3)
			_, a, b := roles(t, tc)
			n := tc.Member(a)
			ctx := ctxT(t, 30*time.Second)
			lease := time.Duration(0)
			if leased {
				lease = 600 * time.Millisecond
			}
			h, err := n.Acquire(ctx, "stock", "a", true, lease)
			require.NoError(t, err)
			lost := lostAt(h)
			got, grantedAt := grantAsync(t, tc.Member(b), "stock", "b")
			requireWaiters(t, tc.Member(b), "stock", 1)
			if !leased {
				tc.CutOff(a)
			}
			tc.Faults(a).PauseLoop()
			h2 := <-got
			require.NotNil(t, h2)
			tick := configOf(tc, a).TickInterval
			deadline := n.holderDeadline()
			want := lockerr.ErrSessionExpired
			if leased {
				deadline, want = h.leaseDeadline(), lockerr.ErrLeaseExpired
			}
			require.False(t, lost().IsZero(), "the holder was not told before the lock was granted elsewhere (loop stalled)")
			require.True(t, lost().Before(grantedAt()), "holder told at %v, waiter granted at %v", lost(), grantedAt())
			t.Logf("holder told %v after its deadline, %v before the waiter was granted",
				lost().Sub(deadline), grantedAt().Sub(lost()))
			require.Less(t, lost().Sub(deadline), 2*tick, "told later than its deadline (by %v)", lost().Sub(deadline))
			require.ErrorIs(t, context.Cause(h.Context()), want)
			require.Greater(t, h2.Token(), h.Token())
			// The loop resumes, learns the session (or lease) was given
			// up, and serves again.
			tc.Faults(a).Resume()
			tc.Heal()
			h3, err := n.Acquire(ctx, "after", "a", true, 0)
			require.NoError(t, err)
			require.NoError(t, h3.Release(ctx))
			require.NoError(t, h2.Release(ctx))
		})
	}
}

// TestS5ReentrantHoldSharesTheLease (S5): a lock's lease belongs to its
// grant (lockfsm keeps one lease per lock, started by the first grant): a
// reentrant Hold of a leased lock, taken without a lease of its own, must
// be told when that lease runs out, before the lock is granted elsewhere,
// even after the first Hold was released. The waiter is on the leader,
// which applies the expiry first.
func TestS5ReentrantHoldSharesTheLease(t *testing.T) {
	tc := newCluster(t, 3)
	lead := leader(t, tc)
	a := otherThan(tc, lead)
	n := tc.Member(a)
	ctx := ctxT(t, 30*time.Second)
	h1, err := n.Acquire(ctx, "r", "a", true, 800*time.Millisecond)
	require.NoError(t, err)
	h2, err := n.Acquire(ctx, "r", "a", true, 0)
	require.NoError(t, err)
	require.Equal(t, h1.Token(), h2.Token(), "reentrant")
	lost := lostAt(h2)
	require.NoError(t, h1.Release(ctx)) // one level; the lock and its lease go on
	got, grantedAt := grantAsync(t, tc.Member(lead), "r", "b")
	h3 := toldBeforeGrant(t, "the reentrant hold", h2, lockerr.ErrLeaseExpired, lost, got, grantedAt)
	require.NoError(t, h3.Release(ctx))
}
