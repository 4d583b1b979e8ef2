package lockraft

import (
	"context"
	"strconv"
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/node"
)

// The lock catalogue: besides the mutex (Lock), a read-write lock (RLock,
// WLock), a counting semaphore (Semaphore), a leader election (Campaign,
// Observe) and an atomic multi-name lock (LockAll), all on the same
// machinery: every grant is one log entry, fair (FIFO per name, no
// barging), fenced (Token), owned by the node's session (its locks end when
// the node's session does: WithSessionTTL), optionally leased (WithLease,
// Renew), delayed after an expiry (WithLockDelay), and told first when lost
// (Context ends before anyone else can be granted it). A name is one kind
// at a time: while it has a holder, a waiter or a lock-delay, a request of
// another kind gets ErrWrongKind.

// Errors of the catalogue. Each is deterministic: nothing was proposed, or
// the cluster refused the request and nothing changed. None is worth
// retrying as is (see IsRetryable).
var (
	// ErrWrongKind: the name is in use as another kind of lock (a mutex
	// taken as a semaphore, a read-write lock locked as a mutex, a
	// multi-name lock naming an election, ...), for Observe too. Outcome:
	// known, nothing changed. Retryable: no, not while the name is in use
	// as that kind.
	ErrWrongKind = lockerr.ErrWrongKind
	// ErrHoldConflict: the owner already holds the name in a way this
	// request cannot extend: one name of a multi-name lock taken singly (or
	// another set), a campaign by the current leader, a semaphore request
	// only the owner's own release could satisfy. Outcome: known, nothing
	// changed. Retryable: no, it could only wait for itself.
	ErrHoldConflict = lockerr.ErrHoldConflict
	// ErrOlderMembers: a member of the cluster's configuration runs (or may
	// run) an older lockraft version, without the catalogue (a rolling
	// upgrade is under way). Outcome: known, nothing was proposed.
	// Retryable: no, not as is: retry once every member is upgraded. The
	// mutex is never affected.
	ErrOlderMembers = lockerr.ErrOlderMembers
)

// newOwner is the owner of a call made without WithOwner:
// "node-<id>/call-<n>", unique on this node (one allocation: it runs on
// every Lock).
func (n *Node) newOwner() string {
	var buf [64]byte
	b := append(buf[:0], n.ownerPrefix...)
	return string(strconv.AppendUint(b, n.ownerID.Add(1), 10))
}

// acquireWith runs one acquisition of any kind, the plain mutex included
// (acquire), for the caller's options, counted under primitive prim
// (metrics.go).
func (n *Node) acquireWith(ctx context.Context, prim int, r node.Request, opts []LockOption) (*node.Hold, error) {
	var lo lockOptions
	for _, opt := range opts {
		opt(&lo)
	}
	if lo.owner == "" {
		lo.owner = n.newOwner()
	}
	r.Owner, r.Lease = lo.owner, lo.lease
	var start time.Time
	if n.m != nil {
		start = time.Now()
	}
	h, err := n.n.AcquireWith(ctx, r)
	kind := opLock
	if !r.Wait {
		kind = opTryLock
	}
	n.m.observe(prim, kind, start, err)
	return h, err
}
