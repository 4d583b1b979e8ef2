package node

import (
	"context"
	"fmt"
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node/internal/lease"
)

// The lock catalogue at the node: read-write locks, counting semaphores,
// leader elections and multi-name locks, on the mutex's machinery. Every
// kind is an Acquire command with the fields of its primitive, proposed,
// retried, cancelled (S4) and handed out (S5, holder.go) exactly as the
// mutex's; its grant is a Hold. The rules of each kind are lockfsm's
// (lockfsm/doc.go).

// Limits of the catalogue (lockfsm's, checked here before anything is
// proposed).
const (
	// MaxPermits is the largest semaphore size.
	MaxPermits = lockfsm.MaxPermits
	// MaxMultiNames is the most names one multi-name lock may take.
	MaxMultiNames = lockfsm.MaxMultiNames
	// MaxValueLen is the longest election value, in bytes.
	MaxValueLen = lockfsm.MaxValueLen
)

// Request is one acquisition of any kind of lock.
type Request struct {
	Name, Owner string
	// Wait: block in FIFO order until granted (or ctx ends); without it,
	// fail at once with lockerr.ErrLocked when the request cannot be granted now.
	Wait bool
	// Lease > 0 gives the hold its own lease (released when it runs out
	// unless renewed; at least lease.Floor, else lockerr.ErrInvalidLease); 0
	// ties it to the node's session.
	Lease time.Duration

	// Primitive is the kind of lock (zero: the mutex).
	Primitive lockfsm.Primitive
	// Shared asks for the read side of a read-write lock (else the write
	// side).
	Shared bool
	// Permits (k) and Limit (N): a semaphore acquisition of k of the name's
	// N permits (1 ≤ k ≤ N ≤ MaxPermits).
	Permits, Limit uint32
	// Value is what an election campaign announces once it leads (at most
	// MaxValueLen bytes).
	Value string
	// ExtraNames makes a mutex request a multi-name lock: Name and these,
	// all taken in one log entry or none (at most MaxMultiNames in all, none
	// repeated).
	ExtraNames []string
}

// AcquireWith takes the lock r describes. With r.Wait it blocks in FIFO
// order until granted or ctx is done; without it fails at once with
// lockerr.ErrLocked when the request cannot be granted now (it never queues). If it
// returns an error, the owner is neither holding nor queued for this call
// within one commit (S4). Bad input is refused before anything is proposed
// (lockerr.ErrInvalidName, lockerr.ErrInvalidOwner, lockerr.ErrInvalidConfig, lockerr.ErrInvalidLease, lockerr.ErrBadPermits,
// lockerr.ErrTooManyNames, lockerr.ErrDuplicateName, lockerr.ErrInvalidValue); so is a catalogue
// request while a member of the configuration may run an older version
// (lockerr.ErrOlderMembers). A name already in use as another kind is refused by the
// cluster (lockerr.ErrWrongKind): nothing changes.
func (n *Node) AcquireWith(ctx context.Context, r Request) (*Hold, error) {
	c, err := r.command(n.cfg.MaxHolds)
	if err == nil {
		err = lease.CheckFloor(r.Lease, n.cfg.TickInterval, n.cfg.heartbeatInterval(), n.cfg.DriftRatio)
	}
	if err != nil {
		return nil, err
	}
	if catalogueCommand(&c) {
		if err := n.fleet.AwaitGate(ctx); err != nil {
			return nil, err
		}
	}
	return n.acquire(ctx, c, r.Lease)
}

// command validates r and builds its Acquire command.
func (r *Request) command(maxHolds uint32) (lockfsm.Command, error) {
	var c lockfsm.Command
	if err := validName(r.Name); err != nil {
		return c, err
	}
	if err := validOwner(r.Owner); err != nil {
		return c, err
	}
	if r.Lease < 0 {
		return c, fmt.Errorf("%w: negative lease %v", lockerr.ErrInvalidConfig, r.Lease)
	}
	c = lockfsm.Command{Kind: lockfsm.KindAcquire, Name: r.Name, Owner: r.Owner, Wait: r.Wait,
		LeaseMillis: uint64(r.Lease.Milliseconds()), MaxHolds: maxHolds, Primitive: r.Primitive}
	if r.Lease > 0 && c.LeaseMillis == 0 {
		c.LeaseMillis = 1
	}
	bad := func(err error, format string, a ...any) (lockfsm.Command, error) {
		return lockfsm.Command{}, fmt.Errorf("%w: %s", err, fmt.Sprintf(format, a...))
	}
	if r.Shared && r.Primitive != lockfsm.PrimRW {
		return bad(lockerr.ErrInvalidConfig, "only a read-write lock has a shared side")
	}
	if (r.Permits != 0 || r.Limit != 0) && r.Primitive != lockfsm.PrimSemaphore {
		return bad(lockerr.ErrInvalidConfig, "only a semaphore has permits")
	}
	if r.Value != "" && r.Primitive != lockfsm.PrimElection {
		return bad(lockerr.ErrInvalidConfig, "only an election campaign carries a value")
	}
	if len(r.ExtraNames) > 0 && r.Primitive != lockfsm.PrimMutex {
		return bad(lockerr.ErrInvalidConfig, "only mutexes can be taken together (multi-name lock)")
	}
	switch r.Primitive {
	case lockfsm.PrimMutex:
		if len(r.ExtraNames)+1 > MaxMultiNames {
			return bad(lockerr.ErrTooManyNames, "%d names (at most %d)", len(r.ExtraNames)+1, MaxMultiNames)
		}
		for i, x := range r.ExtraNames {
			if err := validName(x); err != nil {
				return lockfsm.Command{}, err
			}
			if x == r.Name {
				return bad(lockerr.ErrDuplicateName, "%q", truncate(x))
			}
			for _, y := range r.ExtraNames[:i] {
				if x == y {
					return bad(lockerr.ErrDuplicateName, "%q", truncate(x))
				}
			}
		}
		if len(r.ExtraNames) > 0 {
			c.ExtraNames = append([]string(nil), r.ExtraNames...)
		}
	case lockfsm.PrimRW:
		if r.Shared {
			c.Mode = lockfsm.ModeShared
		}
	case lockfsm.PrimSemaphore:
		if r.Limit == 0 || r.Limit > MaxPermits {
			return bad(lockerr.ErrBadPermits, "semaphore size %d (1..%d)", r.Limit, MaxPermits)
		}
		if r.Permits == 0 || r.Permits > r.Limit {
			return bad(lockerr.ErrBadPermits, "%d permits of %d", r.Permits, r.Limit)
		}
		c.Permits, c.Limit = r.Permits, r.Limit
	case lockfsm.PrimElection:
		if len(r.Value) > MaxValueLen {
			return bad(lockerr.ErrInvalidValue, "%d bytes (at most %d)", len(r.Value), MaxValueLen)
		}
		c.Value = r.Value
	default:
		return bad(lockerr.ErrInvalidConfig, "unknown lock kind %d", r.Primitive)
	}
	return c, nil
}

// catalogueCommand reports whether c needs the catalogue (a version-2
// command): a member without it would apply it as a malformed no-op.
func catalogueCommand(c *lockfsm.Command) bool {
	return c.Primitive != lockfsm.PrimMutex || c.Mode != lockfsm.ModeExclusive || c.Permits > 1 ||
		len(c.ExtraNames) > 0 || c.Limit != 0 || c.Value != "" || c.Kind == lockfsm.KindProclaim
}

// Proclaim changes the value this election leader announces (a Hold of an
// election campaign). Observers see the change in log order. It returns
// lockerr.ErrNotHeld if the leadership was lost or resigned; if ctx ends first the
// outcome is unknown (retrying with the same value is harmless).
func (h *Hold) Proclaim(ctx context.Context, value string) error {
	if h.prim != lockfsm.PrimElection {
		return fmt.Errorf("%w: Proclaim on a %v", lockerr.ErrWrongKind, h.prim)
	}
	if len(value) > MaxValueLen {
		return fmt.Errorf("%w: %d bytes (at most %d)", lockerr.ErrInvalidValue, len(value), MaxValueLen)
	}
	if h.released.Load() || h.endCause() != nil {
		return fmt.Errorf("%w: %w", lockerr.ErrNotHeld, h.endCause())
	}
	n := h.n
	o := newCallerOp(lockfsm.Command{Kind: lockfsm.KindProclaim, Name: h.name, Owner: h.owner, Value: value,
		Token: h.token})
	done := o.done
	if err := n.submitOp(ctx, o, nil); err != nil {
		return err
	}
	select {
	case <-done:
		out := o.out
		if out.err != nil {
			return out.err
		}
		if out.res.Err != nil {
			if cause := h.endCause(); cause != nil {
				return fmt.Errorf("%w: %w", lockerr.ErrNotHeld, cause)
			}
			return fsmError(out.res, h.name)
		}
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
