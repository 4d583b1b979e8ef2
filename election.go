package lockraft

import (
	"context"
	"iter"
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node"
)

// Leader election, as etcd's concurrency.Election or Curator's
// LeaderLatch/LeaderSelector: Campaign blocks until this caller leads the
// election name, FIFO among the campaigners. The leadership's Context ends
// before anyone else can lead (the node's session or the leadership's lease
// could expire, Resign, Close); its Token is the term, strictly increasing
// over the election's leaders (a fencing token: a resource that rejects
// lower terms never takes orders from a deposed leader). Proclaim changes
// the value the leader announces (its address, say). Observe yields every
// change of leader and value in log order, pushed from the node's own apply
// (no polling), starting with the current one. When the leading node
// crashes, the next campaigner leads within the session TTL plus two
// election timeouts. Not reentrant: a campaign by the leader itself is
// ErrHoldConflict. Lock-delay (WithLockDelay) leaves the election without a
// leader for that long after its leader's session expired.

// MaxValueLen is the longest election value, in bytes.
const MaxValueLen = node.MaxValueLen

// MaxObserveBacklog is how many changes an Observe may have undelivered (its
// loop body has not taken them yet) before it ends with ErrObserveLagged.
const MaxObserveBacklog = node.MaxObserveBacklog

var (
	// ErrInvalidValue: an election value longer than MaxValueLen bytes.
	// Outcome: known, nothing was proposed. Retryable: no, fix the value.
	ErrInvalidValue = lockerr.ErrInvalidValue
	// ErrObserveLagged ends an Observe that cannot be given every change:
	// its loop fell MaxObserveBacklog changes behind, or its node
	// missed changes it cannot replay (its lock table was restored from a
	// snapshot; on a light member, the leader's records do not reach back).
	// Rather than skip one, the observation stops. Outcome: known, the
	// election is unaffected. Retryable: yes: Observe again to resume from
	// the current leader.
	ErrObserveLagged = lockerr.ErrObserveLagged
)

// Campaign blocks until this call leads the election name, announcing
// value, or until ctx is done; if it returns an error, it neither leads nor
// waits (within one commit). WithLease gives the leadership its own lease
// (Renew).
func (n *Node) Campaign(ctx context.Context, name, value string, opts ...LockOption) (*Leadership, error) {
	h, err := n.acquireWith(ctx, primElection, node.Request{Name: name, Wait: true, Primitive: lockfsm.PrimElection, Value: value},
		opts)
	if err != nil {
		return nil, err
	}
	return &Leadership{h: h, m: n.m}, nil
}

// Leadership is this caller's leadership of an election. Safe for
// concurrent use.
type Leadership struct {
	h *node.Hold
	m *metrics // nil without WithMetrics
}

// Context is cancelled when the leadership ends, before anyone else can
// lead; context.Cause says why (ErrReleased after Resign, ErrLeaseExpired,
// ErrSessionExpired, ErrClosed).
func (l *Leadership) Context() context.Context { return l.h.Context() }

// Token is the term: strictly increasing over the election's leaders.
func (l *Leadership) Token() uint64 { return l.h.Token() }

// Name is the election's name.
func (l *Leadership) Name() string { return l.h.Name() }

// Proclaim changes the value this leader announces; observers see it in
// log order. ErrNotHeld if the leadership ended; if ctx ends first the
// outcome is unknown (proclaiming the same value again is harmless).
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	err := l.h.Proclaim(ctx, value)
	l.m.observe(primElection, opProclaim, time.Time{}, err)
	return err
}

// Resign ends the leadership; the next campaigner leads in the same log
// entry. ErrNotHeld if it had already ended. If ctx ends first the outcome
// is unknown; the node keeps retrying.
func (l *Leadership) Resign(ctx context.Context) error {
	err := l.h.Release(ctx)
	l.m.observe(primElection, opUnlock, time.Time{}, err)
	return err
}

// Renew restarts the leadership's own lease (WithLease).
func (l *Leadership) Renew(ctx context.Context) error {
	err := l.h.Renew(ctx)
	l.m.observe(primElection, opRenew, time.Time{}, err)
	return err
}

// Leader is one state of an election.
type Leader struct {
	Name  string
	Owner string // "" when nobody leads
	Token uint64 // the term; 0 when nobody leads
	Value string
	// Index is the log entry that made the change (for the first state an
	// observer gets, the entry its node had applied).
	Index uint64
}

// Leading reports whether someone leads.
func (l Leader) Leading() bool { return l.Token != 0 }

// Observe yields the election's current leader (or nobody), then every
// change of leader or value, in log order, each once, until ctx ends (it
// then yields ctx's error and stops) or the node stops (ErrClosed or its
// error), or the loop body falls MaxObserveBacklog changes behind
// or its node cannot show it every change (ErrObserveLagged: never a
// silent gap). A failover of the raft leader loses or repeats none. A name
// in use as another kind of lock (a mutex, say) yields ErrWrongKind at once
// (on a light member, which keeps no lock table, it yields nobody leading).
// The first item is the leader as this node has applied it: on a follower
// it may trail a Proclaim or Resign that just returned elsewhere, and that
// change then follows as the next item.
//
//	for l, err := range node.Observe(ctx, "scheduler") {
//		if err != nil {
//			return err
//		}
//		route(l.Value)
//	}
func (n *Node) Observe(ctx context.Context, name string) iter.Seq2[Leader, error] {
	return func(yield func(Leader, error) bool) {
		o, err := n.n.Observe(ctx, name)
		if err != nil {
			yield(Leader{}, err)
			return
		}
		defer o.Close()
		for {
			c, err := o.Next(ctx)
			if err != nil {
				yield(Leader{}, err)
				return
			}
			if !yield(Leader{Name: c.Name, Owner: c.Owner, Token: c.Token, Value: c.Value, Index: c.Index}, nil) {
				return
			}
		}
	}
}
