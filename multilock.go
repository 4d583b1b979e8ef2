package lockraft

import (
	"context"
	"fmt"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/node"
)

// Atomic multi-name lock (Redisson's MultiLock without its hold-and-wait):
// LockAll takes several names in one log entry, all or none. It holds
// nothing while it waits, so callers naming the same names in any order
// never deadlock. It waits FIFO on every one of its names and is granted in
// the first entry in which it is first in every one of those queues and all
// its names are free; while it is first in a queue, later requests on that
// name (single-name or not) wait behind it even if that name is free. The
// handle has one token for all the names (strictly above every earlier grant
// of each), one Context, one Unlock that releases them all, and one lease
// (WithLease). The names are mutexes: Lock of one of them by another owner
// waits like any Lock; by the same owner (WithOwner) it is ErrHoldConflict.

// MaxMultiNames is the most names one LockAll may take.
const MaxMultiNames = node.MaxMultiNames

var (
	// ErrTooManyNames: LockAll of more than MaxMultiNames names. Outcome:
	// known, nothing was proposed. Retryable: no, fix the call.
	ErrTooManyNames = lockerr.ErrTooManyNames
	// ErrDuplicateName: LockAll naming a name twice. Outcome: known,
	// nothing was proposed. Retryable: no, fix the call.
	ErrDuplicateName = lockerr.ErrDuplicateName
)

// LockAll blocks until every one of names is granted to this call in one
// log entry, or until ctx is done; if it returns an error, none is held or
// queued for it (within one commit). An empty list is ErrInvalidName; more
// than MaxMultiNames is ErrTooManyNames; a repeated name ErrDuplicateName;
// a name in use as another kind of lock ErrWrongKind. With one name it is
// Lock.
func (n *Node) LockAll(ctx context.Context, names []string, opts ...LockOption) (*Lock, error) {
	return n.lockAll(ctx, names, true, opts)
}

// TryLockAll takes every one of names only if all are free and nobody waits
// for any of them; otherwise ErrLocked at once, holding none. It never
// queues.
func (n *Node) TryLockAll(ctx context.Context, names []string, opts ...LockOption) (*Lock, error) {
	return n.lockAll(ctx, names, false, opts)
}

func (n *Node) lockAll(ctx context.Context, names []string, wait bool, opts []LockOption) (*Lock, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: LockAll needs at least one name", ErrInvalidName)
	}
	h, err := n.acquireWith(ctx, primMulti, node.Request{Name: names[0], ExtraNames: names[1:], Wait: wait}, opts)
	if err != nil {
		return nil, err
	}
	return &Lock{h: h, m: n.m, prim: primMulti}, nil
}

// Names is every name the handle holds: Name, then for LockAll the others,
// in the order they were asked for.
func (l *Lock) Names() []string { return l.h.Names() }
