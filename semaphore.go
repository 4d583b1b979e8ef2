package lockraft

import (
	"context"
	"fmt"
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node"
)

// Counting semaphore: a name with a fixed number of permits, as Redisson's
// RSemaphore and RPermitExpirableSemaphore or Curator's
// InterProcessSemaphoreV2, fenced and FIFO-fair: a request at the head for
// k permits is never overtaken by later smaller ones (TryAcquire fails
// then), and permits in use never exceed the size at any log index. Each
// acquisition is its own handle (Permit) with its own token, Context,
// Release and, with WithLease, its own lease (a permit that expires unless
// renewed). The size is fixed by the request that puts the name in the
// table; while it has holders or waiters, a request with another size gets
// ErrPermitsMismatch. Not reentrant: every Acquire is a new acquisition,
// even for the same owner (an owner asking for more than the size minus
// what it holds gets ErrHoldConflict: it could only wait for itself).
// Lock-delay (WithLockDelay) delays the whole name after an expiry: no new
// acquisition until it ends.

// MaxPermits is the largest semaphore size.
const MaxPermits = node.MaxPermits

var (
	// ErrBadPermits: a semaphore size below 1 or above MaxPermits, or a
	// request for fewer than 1 or more than size permits. Outcome: known,
	// nothing was proposed. Retryable: no, fix the call.
	ErrBadPermits = lockerr.ErrBadPermits
	// ErrPermitsMismatch: the name is in use as a semaphore of another size.
	// Outcome: known, nothing changed. Retryable: no, not while it is.
	ErrPermitsMismatch = lockerr.ErrPermitsMismatch
)

// Semaphore is the counting semaphore name with size permits, as seen from
// this node. It holds no state: making one costs nothing and proposes
// nothing; every Semaphore of the same name and size, on any node, is the
// same semaphore. Safe for concurrent use.
type Semaphore struct {
	n    *Node
	name string
	size int
}

// Semaphore returns the semaphore name of size permits. Bad sizes are
// reported by Acquire (ErrBadPermits).
func (n *Node) Semaphore(name string, size int) *Semaphore {
	return &Semaphore{n: n, name: name, size: size}
}

// Name is the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Size is the semaphore's number of permits.
func (s *Semaphore) Size() int { return s.size }

// Acquire blocks until permits of the semaphore's permits are granted to
// this call, in FIFO order, or until ctx is done. If it returns an error,
// nothing is held or queued for it (within one commit).
func (s *Semaphore) Acquire(ctx context.Context, permits int, opts ...LockOption) (*Permit, error) {
	return s.acquire(ctx, permits, true, opts)
}

// TryAcquire takes permits only if they are free now and nobody waits;
// otherwise ErrLocked at once. It never queues.
func (s *Semaphore) TryAcquire(ctx context.Context, permits int, opts ...LockOption) (*Permit, error) {
	return s.acquire(ctx, permits, false, opts)
}

func (s *Semaphore) acquire(ctx context.Context, permits int, wait bool, opts []LockOption) (*Permit, error) {
	if s.size < 1 || s.size > MaxPermits {
		return nil, fmt.Errorf("%w: size %d (1..%d)", ErrBadPermits, s.size, MaxPermits)
	}
	if permits < 1 || permits > s.size {
		return nil, fmt.Errorf("%w: %d permits of %d", ErrBadPermits, permits, s.size)
	}
	h, err := s.n.acquireWith(ctx, primSemaphore, node.Request{Name: s.name, Wait: wait, Primitive: lockfsm.PrimSemaphore,
		Permits: uint32(permits), Limit: uint32(s.size)}, opts)
	if err != nil {
		return nil, err
	}
	return &Permit{h: h, m: s.n.m}, nil
}

// Permit is one acquisition of a semaphore's permits. Safe for concurrent
// use.
type Permit struct {
	h *node.Hold
	m *metrics // nil without WithMetrics
}

// Release gives the permits back; a request waiting at the head is granted
// in the same log entry if they make room. ErrNotHeld if already released or
// lost. If ctx ends first the outcome is unknown; the node keeps retrying.
func (p *Permit) Release(ctx context.Context) error {
	err := p.h.Release(ctx)
	p.m.observe(primSemaphore, opUnlock, time.Time{}, err)
	return err
}

// Token is the fencing token of this acquisition: the index of the entry
// that granted it, at least every earlier grant of the semaphore
// (acquisitions granted in one entry share it).
func (p *Permit) Token() uint64 { return p.h.Token() }

// Context is cancelled when the permits are lost or released; context.Cause
// says why (ErrReleased, ErrLeaseExpired, ErrSessionExpired, ErrClosed).
func (p *Permit) Context() context.Context { return p.h.Context() }

// Permits is how many permits this acquisition holds.
func (p *Permit) Permits() int { return int(p.h.Permits()) }

// Name is the semaphore's name.
func (p *Permit) Name() string { return p.h.Name() }

// Owner is the owner the permits are held for.
func (p *Permit) Owner() string { return p.h.Owner() }

// Renew restarts this acquisition's own lease (WithLease). ErrNotHeld if it
// already ran out.
func (p *Permit) Renew(ctx context.Context) error {
	err := p.h.Renew(ctx)
	p.m.observe(primSemaphore, opRenew, time.Time{}, err)
	return err
}
