package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node/internal/callerr"
)

// Hold is one successful acquisition of a lock. Reentrant acquisitions by the
// same owner each get their own Hold with the same token; each must be
// released once. A Hold is safe for concurrent use.
//
// lease is the grant's own lease, shared with the grant's other Holds (nil:
// the lock lives as long as the session). parent is the lease's context, or
// the session's: their timers cancel it at the holder-side deadline
// (holder.go), which ends the hold.
type Hold struct {
	n        *Node
	name     string
	owner    string
	token    uint64
	prim     lockfsm.Primitive
	mode     lockfsm.Mode
	permits  uint32   // semaphore: permits this acquisition holds
	extra    []string // multi-name lock: the names besides name
	lease    *grantLease
	parent   context.Context
	released atomic.Bool

	mu sync.Mutex
	// ended says why the hold ended, when it ended before anyone asked for
	// its Context; ctx and cancel are nil until Context is first called. A
	// caller that never asks costs the lock path no context of its own.
	ended  error
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// Name is the lock name.
func (h *Hold) Name() string { return h.name }

// Owner is the owner the lock is held for.
func (h *Hold) Owner() string { return h.owner }

// Token is the fencing token: the raft index of the entry that granted the
// lock. It strictly increases across successive grants of one name (S2).
func (h *Hold) Token() uint64 { return h.token }

// Context is cancelled when this hold ends: context.Cause says why
// (lockerr.ErrReleased, lockerr.ErrLeaseExpired, lockerr.ErrSessionExpired, lockerr.ErrClosed).
// Every call returns the same context, made by the first.
func (h *Hold) Context() context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.ctx != nil:
	case h.ended != nil:
		// Ended first: a parent that ended since must not overrule it.
		h.ctx, h.cancel = context.WithCancelCause(context.WithoutCancel(h.parent))
		h.cancel(h.ended)
	default:
		h.ctx, h.cancel = context.WithCancelCause(h.parent)
	}
	return h.ctx
}

// end ends the hold with cause. Like a context's cancel, only the first end
// counts, and an end of its parent before it counts first.
func (h *Hold) end(cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx != nil {
		h.cancel(cause)
		return
	}
	if h.ended == nil {
		if h.ended = context.Cause(h.parent); h.ended == nil {
			h.ended = cause
		}
	}
}

// endCause is why the hold ended, nil while it is held: what context.Cause
// of its Context says, without making one.
func (h *Hold) endCause() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.ctx != nil:
		return context.Cause(h.ctx)
	case h.ended != nil:
		return h.ended
	}
	return context.Cause(h.parent)
}

// primitive is the kind of lock held: mutex (also a multi-name lock),
// read-write lock, semaphore or election.
func (h *Hold) primitive() lockfsm.Primitive { return h.prim }

// Shared reports whether this is the read side of a read-write lock.
func (h *Hold) Shared() bool { return h.mode == lockfsm.ModeShared }

// Permits is the number of semaphore permits this acquisition holds (0 for
// other kinds).
func (h *Hold) Permits() uint32 { return h.permits }

// Names is every name the hold takes: Name, then, for a multi-name lock,
// the others in request order. The slice is a copy.
func (h *Hold) Names() []string { return append([]string{h.name}, h.extra...) }

// key identifies the lockfsm hold this Hold is a level of.
func (h *Hold) key() holdKey {
	return holdKey{name: groupName(h.name, h.extra), owner: h.owner, mode: h.mode, token: h.token}
}

// groupName is the name a hold is filed under in the registry: its name, or
// for a multi-name lock the least of its names, so that a reentrant LockAll
// that lists the same names in another order is the same hold, and the
// EventReleased of the group (which names them all) finds it.
func groupName(name string, extra []string) string {
	for _, x := range extra {
		name = min(name, x)
	}
	return name
}

// sharedToken reports whether other holds of the name may carry the same
// token (readers or permits granted in one entry): the leader then needs the
// session and owner to tell this one's lease apart.
func (h *Hold) sharedToken() bool { return h.mode == lockfsm.ModeShared || h.permits > 0 }

// heldLock is the node's view of one lockfsm hold its session has: the
// Holds of its reentrant levels.
type heldLock struct {
	handles []*Hold
	lease   *grantLease // the grant's own lease, nil without one
	first   [1]*Hold    // handles' first backing array: most holds have one level
}

// holdKey names one lockfsm hold of this node's session: a mutex, election
// or multi-name hold by (name, owner), a read-write lock's side by mode, a
// semaphore acquisition by its token. The token is in the key for all of
// them: a hold whose token differs is another grant (the old one was lost).
type holdKey struct {
	name, owner string
	mode        lockfsm.Mode
	token       uint64
}

// holdRegistry maps the locks this node's session holds to the handles that
// must learn when they are lost. Owned by the loop goroutine.
type holdRegistry struct {
	held map[holdKey]*heldLock
}

func (r *holdRegistry) init() { r.held = map[holdKey]*heldLock{} }

func (r *holdRegistry) add(h *Hold) {
	k := h.key()
	hl := r.held[k]
	if hl == nil {
		hl = &heldLock{lease: h.lease}
		hl.handles = hl.first[:0]
		r.held[k] = hl
	}
	hl.handles = append(hl.handles, h)
}

// lose ends every handle of one hold with cause.
func (r *holdRegistry) lose(k holdKey, cause error) {
	if hl := r.held[k]; hl != nil {
		for _, h := range hl.handles {
			h.end(cause)
		}
		delete(r.held, k)
	}
}

// drop removes one handle after its Release was applied.
func (r *holdRegistry) drop(h *Hold) {
	k := h.key()
	hl := r.held[k]
	if hl == nil {
		return
	}
	if i := slices.Index(hl.handles, h); i >= 0 {
		hl.handles = slices.Delete(hl.handles, i, i+1)
	}
	if len(hl.handles) == 0 {
		delete(r.held, k)
	}
}

func (r *holdRegistry) loseAll(cause error) {
	for k, hl := range r.held {
		for _, h := range hl.handles {
			h.end(cause)
		}
		delete(r.held, k)
	}
}

// holdRequest carries what an Acquire needs once granted.
type holdRequest struct {
	lease  time.Duration
	sentAt time.Time
}

func validName(name string) error {
	if name == "" || len(name) > maxNameLen || !utf8.ValidString(name) {
		return fmt.Errorf("%w: %q", lockerr.ErrInvalidName, truncate(name))
	}
	return nil
}

func validOwner(owner string) error {
	if owner == "" || len(owner) > maxOwnerLen || !utf8.ValidString(owner) {
		return fmt.Errorf("%w: %q", lockerr.ErrInvalidOwner, truncate(owner))
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// Acquire takes the named lock for owner. With wait it blocks in FIFO order
// until granted or ctx is done (if this node has no leader then, the error
// wraps both lockerr.ErrUnavailable and ctx's cause); without, it fails with
// lockerr.ErrLocked when another owner holds the name, and with lockerr.ErrUnavailable if no
// answer comes within two election timeouts (a cluster without a leader). lease > 0 gives the lock its own lease (it is
// released when the lease runs out unless renewed); 0 ties it to the node's
// session. If Acquire returns an error, the node guarantees the owner is
// neither holding nor queued for this call within one commit (S4).
func (n *Node) Acquire(ctx context.Context, name, owner string, wait bool, lease time.Duration) (*Hold, error) {
	return n.AcquireWith(ctx, Request{Name: name, Owner: owner, Wait: wait, Lease: lease})
}

// acquire runs the Acquire command c (validated, not yet proposed) for its
// caller: S4 on every error path.
func (n *Node) acquire(ctx context.Context, c lockfsm.Command, lease time.Duration) (*Hold, error) {
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	if n.closing.Load() {
		return nil, lockerr.ErrClosed
	}
	ctx, cancel := n.acquireContext(ctx, c.Wait) // TryLock's bound (leaderfail.go)
	defer cancel()
	o := newCallerOp(c)
	o.hold = holdRequest{lease: lease}
	done := o.done
	if n.k.Stages != nil {
		o.calledAt = time.Now()
	}
	if err := n.submitOp(ctx, o, nil); err != nil {
		return nil, err
	}
	select {
	case <-done:
		n.k.Returned(n.id, o.index, o.calledAt, o.firstProposed)
		return o.out.hold, callerr.InOutage(o.out.err, n.leaderless)
	case <-ctx.Done():
	}
	// The caller gave up. Settle the op inside the loop, then look once more:
	// a grant may have raced the cancellation and must not be left behind.
	settled := make(chan struct{})
	if n.do(context.Background(), func() { n.abandon(o); close(settled) }) == nil {
		select {
		case <-settled:
		case <-n.donec:
		}
	}
	select {
	case <-done:
		if h := o.out.hold; h != nil {
			h.releaseInBackground()
		}
	default:
	}
	return nil, n.staticUnavailable(n.acquireGaveUp(ctx, c.Wait))
}

// onAcquireResult completes an Acquire from its own apply.
func (n *Node) onAcquireResult(o *op, res lockfsm.Result) {
	r := &n.loop.ops
	switch {
	case res.Err != nil:
		r.complete(o, opResult{err: fsmError(res, o.cmd.Name)})
	case n.loop.own.closing:
		// Close already told every holder their locks are lost and proposed
		// the CloseSession that releases this grant (or this waiter) too:
		// once it commits, another node may be granted the lock before this
		// one applies it, so no live hold may be handed out now (S5).
		r.complete(o, opResult{err: lockerr.ErrClosed})
	case res.Status == lockfsm.Queued:
		o.queued = true
		r.queued[o.cmd.Seq] = o
	case res.Status == lockfsm.Granted:
		n.handOut(o, res.Token, res.Duplicate)
	default:
		r.complete(o, opResult{err: fmt.Errorf("lockraft: unexpected acquire status %v", res.Status)})
	}
}

// newHold makes the Hold of o's grant with token (loop), a child of its
// session's context or of its grant's lease context, so that the
// holder-side timers cancel it at its deadline without the loop (S5). It
// fails if that deadline has already passed: lockerr.ErrSessionExpired, or
// lockerr.ErrLeaseExpired for a reentrant Hold of a lease that ran out. fresh: the
// Hold starts a new leased grant, whose lease the caller must start
// (grantLease.start) or confirm first.
func (n *Node) newHold(o *op, token uint64) (h *Hold, fresh bool, err error) {
	s := &n.loop.own
	if s.ctx == nil || s.ctx.Err() != nil || n.clock.Now().After(n.holderDeadline()) {
		return nil, false, lockerr.ErrSessionExpired
	}
	h = &Hold{n: n, name: o.cmd.Name, owner: o.cmd.Owner, token: token, prim: o.cmd.Primitive, mode: o.cmd.Mode,
		extra: o.cmd.ExtraNames}
	if h.prim == lockfsm.PrimSemaphore {
		h.permits = max(o.cmd.Permits, 1)
	}
	parent := s.ctx
	if hl := n.loop.holds.held[h.key()]; hl != nil {
		// A reentrant Hold shares its grant's lease: lockfsm keeps one
		// lease per lock, started by the first grant.
		h.lease = hl.lease
		if h.lease != nil && n.clock.Now().After(h.lease.deadline()) {
			h.lease.cancel(lockerr.ErrLeaseExpired)
		}
	} else if o.hold.lease > 0 {
		// Counted from the Acquire's first send, which is before the
		// leader applied the grant and started its lease.
		h.lease = newGrantLease(n, s.ctx, h.key(), h.name, o.hold.lease, o.hold.sentAt)
		fresh = true
	}
	if h.lease != nil {
		parent = h.lease.ctx
	}
	h.parent = parent
	if cause := context.Cause(parent); cause != nil {
		return nil, false, cause
	}
	n.loop.holds.add(h)
	return h, fresh, nil
}

// fsmErrors are the public sentinels of the lock table's refusals; a named
// one says which name it refuses.
var fsmErrors = []struct {
	fsm, public error
	named       bool
}{
	{lockfsm.ErrNotHolder, lockerr.ErrNotHeld, false},
	{lockfsm.ErrTooManyHolds, lockerr.ErrTooManyHolds, false},
	{lockfsm.ErrAlreadyWaiting, lockerr.ErrAlreadyWaiting, false},
	{lockfsm.ErrNoSession, lockerr.ErrSessionExpired, false},
	{lockfsm.ErrInvalidName, lockerr.ErrInvalidName, false},
	{lockfsm.ErrInvalidOwner, lockerr.ErrInvalidOwner, false},
	{lockfsm.ErrWrongKind, lockerr.ErrWrongKind, true},
	{lockfsm.ErrUpgrade, lockerr.ErrUpgrade, true},
	{lockfsm.ErrHoldConflict, lockerr.ErrHoldConflict, true},
	{lockfsm.ErrBadPermits, lockerr.ErrBadPermits, true},
	{lockfsm.ErrPermitsMismatch, lockerr.ErrPermitsMismatch, true},
	{lockfsm.ErrTooManyNames, lockerr.ErrTooManyNames, false},
	{lockfsm.ErrDuplicateName, lockerr.ErrDuplicateName, false},
	{lockfsm.ErrInvalidValue, lockerr.ErrInvalidValue, false},
}

func fsmError(res lockfsm.Result, name string) error {
	if errors.Is(res.Err, lockfsm.ErrLocked) {
		if res.Holder.Owner == "" {
			return fmt.Errorf("%w: %q (no permits free, waiters ahead, or in its lock-delay)", lockerr.ErrLocked, name)
		}
		return fmt.Errorf("%w: %q held by owner %q", lockerr.ErrLocked, name, res.Holder.Owner)
	}
	for _, e := range fsmErrors {
		if errors.Is(res.Err, e.fsm) {
			if e.named {
				return fmt.Errorf("%w: %q", e.public, name)
			}
			return e.public
		}
	}
	return res.Err
}

// Release gives up this hold (one level of a reentrant lock). When the last
// level goes, the lock passes to the next waiter in the same log entry.
// It returns lockerr.ErrNotHeld if this Hold was already released or the lock was
// lost. If ctx ends first, the outcome is unknown; the node keeps proposing
// the release until it is applied.
func (h *Hold) Release(ctx context.Context) error {
	if !h.released.CompareAndSwap(false, true) {
		return lockerr.ErrNotHeld
	}
	if cause := h.endCause(); errors.Is(cause, lockerr.ErrSessionExpired) || errors.Is(cause, lockerr.ErrClosed) {
		// Lost with its session, whose end (or the close this node
		// proposes for it) releases it: nothing to propose, and no new
		// session to wait for (a node cut off would wait for ever).
		return fmt.Errorf("%w: %w", lockerr.ErrNotHeld, cause)
	}
	n := h.n
	o := newCallerOp(h.releaseCommand())
	done := o.done
	if n.k.Stages != nil {
		o.calledAt = time.Now()
	}
	if err := n.submitOp(ctx, o, h); err != nil {
		return err
	}
	select {
	case <-done:
		out := o.out
		n.k.Returned(n.id, o.index, o.calledAt, o.firstProposed)
		if out.err != nil {
			return out.err
		}
		if out.res.Err != nil {
			if cause := h.endCause(); cause != nil && !errors.Is(cause, lockerr.ErrReleased) {
				return fmt.Errorf("%w: %w", lockerr.ErrNotHeld, cause)
			}
			return fsmError(out.res, h.name)
		}
		h.end(lockerr.ErrReleased)
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// releaseInBackground releases a hold nobody will use (a grant that raced
// its caller's cancellation).
func (h *Hold) releaseInBackground() {
	if !h.released.CompareAndSwap(false, true) {
		return
	}
	n := h.n
	_ = n.do(context.Background(), func() {
		n.loop.holds.drop(h)
		n.submit(&op{cmd: h.releaseCommand()})
	})
	h.end(lockerr.ErrReleased)
}

// releaseCommand is the Release of one level of h: by mode for a read-write
// lock, by token for a semaphore; the token guards every kind but the mutex
// (whose Release stays a version-1 command, as it was).
func (h *Hold) releaseCommand() lockfsm.Command {
	c := lockfsm.Command{Kind: lockfsm.KindRelease, Name: h.name, Owner: h.owner, Primitive: h.prim, Mode: h.mode}
	if h.prim != lockfsm.PrimMutex {
		c.Token = h.token
	}
	return c
}

// onEvent reacts to one lockfsm event: leader timers for every session, and
// waiters and handles for this node's own.
func (n *Node) onEvent(index uint64, ev *lockfsm.Event) {
	if ev.Kind == lockfsm.EventLeader {
		if !n.light() {
			n.loop.observe.onEvent(index, ev)
		}
		return
	}
	n.fwd.OnEvent(ev)
	n.loop.lease.OnEvent(ev, n.clock.Now())
	if ev.Kind == lockfsm.EventSessionOpened {
		n.onSessionOpenedEvent(index, ev)
		return
	}
	own := n.loop.own.id
	if own == 0 || ev.Session != own {
		return
	}
	r := &n.loop.ops
	switch ev.Kind {
	case lockfsm.EventGranted:
		if !ev.FromQueue {
			return // immediate grants complete from the command's own result
		}
		o := r.queued[ev.Seq]
		if o == nil || o.granted != nil {
			// Its caller gave up (the Cancel on its way releases it), or
			// this grant is already being handed out (a light member
			// hears of it from a push and from fwd-status).
			return
		}
		n.handOut(o, ev.Token, true)
	case lockfsm.EventReleased:
		n.loop.holds.lose(holdKey{name: groupName(ev.Name, ev.ExtraNames), owner: ev.Owner, mode: ev.Mode,
			token: ev.Token}, reasonError(ev.Reason))
	case lockfsm.EventWaitEnded:
		// A grant being confirmed is settled by its renewal (a stale
		// fwd-status "gone" must not leave its Hold behind).
		if o := r.queued[ev.Seq]; o != nil && o.granted == nil {
			delete(r.queued, ev.Seq)
			r.complete(o, opResult{err: reasonError(ev.Reason)})
		}
	case lockfsm.EventSessionEnded:
		n.onOwnSessionEnded(ev)
	case lockfsm.EventSessionEnding:
		n.onOwnSessionEnding(ev)
	}
}

// reasonError maps why lockfsm ended a hold or a wait to the cause a caller
// sees.
func reasonError(r lockfsm.Reason) error {
	switch r {
	case lockfsm.ReasonUnlock:
		return lockerr.ErrReleased
	case lockfsm.ReasonLeaseExpired:
		return lockerr.ErrLeaseExpired
	case lockfsm.ReasonSessionExpired:
		return lockerr.ErrSessionExpired
	case lockfsm.ReasonSessionClosed:
		return lockerr.ErrClosed
	case lockfsm.ReasonCancel:
		return context.Canceled
	}
	return fmt.Errorf("lockraft: lock ended (reason %d)", r)
}
