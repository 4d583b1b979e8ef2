package lockraft

import (
	"context"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node"
)

// Read-write lock: many readers or one writer per name, as Redisson's
// RReadWriteLock, Curator's InterProcessReadWriteLock or etcd's recipes
// RWMutex, and fair where those are not all: strict FIFO over one queue.
// Consecutive readers at the head are granted together; a writer waits for
// the readers ahead of it, and readers that come after a waiting writer wait
// behind it (no writer starvation, no reader barging: TryRLock fails then).
// Tokens never go down: a writer's is strictly above every earlier grant of
// the name, a reader's at least every earlier one (readers granted in one
// entry share it), so a resource can fence writers against stale readers
// too. Reentrant per explicit owner (WithOwner) in each mode; a writer may
// take the read side at once (downgrade: RLock, then Unlock the write
// side); a reader's WLock is refused with ErrUpgrade rather than deadlock.
// Lock-delay (WithLockDelay) delays the whole name after an expiry: no new
// reader nor writer until it ends, though readers still holding keep it.

// ErrUpgrade: WLock by an owner that holds the read side of the same lock.
// Refused rather than queued, since it could only wait for itself: Unlock
// the read side first. Outcome: known, nothing changed. Retryable: no.
var ErrUpgrade = lockerr.ErrUpgrade

// RLock blocks until the read side of the read-write lock name is granted
// to this call, in FIFO order, or until ctx is done. It returns a handle
// like Lock's (Unlock, Token, Context, Renew). If RLock returns an error,
// nothing is held or queued for it (within one commit).
func (n *Node) RLock(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	return n.rw(ctx, name, true, true, opts)
}

// TryRLock takes the read side only if that is possible now: no writer
// holds it and none waits (or the owner re-enters, or holds the write
// side); otherwise ErrLocked at once. It never queues.
func (n *Node) TryRLock(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	return n.rw(ctx, name, true, false, opts)
}

// WLock blocks until the write side of the read-write lock name is granted
// to this call (no reader nor writer holds it and it is first in line), or
// until ctx is done.
func (n *Node) WLock(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	return n.rw(ctx, name, false, true, opts)
}

// TryWLock takes the write side only if the lock is free and nobody waits
// (or the owner re-enters); otherwise ErrLocked at once.
func (n *Node) TryWLock(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	return n.rw(ctx, name, false, false, opts)
}

func (n *Node) rw(ctx context.Context, name string, shared, wait bool, opts []LockOption) (*Lock, error) {
	h, err := n.acquireWith(ctx, primRW, node.Request{Name: name, Wait: wait, Primitive: lockfsm.PrimRW, Shared: shared}, opts)
	if err != nil {
		return nil, err
	}
	return &Lock{h: h, m: n.m, prim: primRW}, nil
}

// Shared reports whether the handle holds the read side of a read-write
// lock.
func (l *Lock) Shared() bool { return l.h.Shared() }
