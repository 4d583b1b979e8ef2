package node

import (
	"context"
	"fmt"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// renewRequest names the hold a renewal is for. Holds that own their token
// (mutex, writer, election, multi-name) are named by name and token, as
// every version's leader understands. Readers and semaphore permits granted
// in one entry share a token, so their renewal also names the holder
// (session, owner: RenewRequest's fields 3 and 4) for the leader to renew
// the right one. Such holds exist only once every member runs the catalogue
// (lockerr.ErrOlderMembers), so no leader that lacks it is ever asked.
type renewRequest struct {
	name, owner    string
	token, session uint64
}

// Renew restarts the lock's own lease (a lock taken with a lease; every Hold
// of the grant shares it). Renewals go to the leader and are not logged. On
// success the holder-side deadline moves to the renewal's send time plus the
// lease, minus the drift margin.
// It returns lockerr.ErrNotHeld if the lease already ran out or the lock was lost,
// lockerr.ErrUnavailable if the leader could not be reached in time (the lease keeps
// running: retry). A Hold without a lease has nothing to renew: nil.
func (h *Hold) Renew(ctx context.Context) error {
	if h.lease == nil {
		return nil
	}
	if cause := h.endCause(); cause != nil || h.released.Load() {
		return fmt.Errorf("%w: %w", lockerr.ErrNotHeld, cause)
	}
	n := h.n
	lead := n.lead.Load()
	if lead == 0 {
		return lockerr.ErrUnavailable
	}
	sent := n.clock.Now()
	// The leader files the lease under the name of the request that was
	// granted (a reentrant LockAll may list the names in another order).
	r := renewRequest{name: h.lease.filed, token: h.token}
	if h.sharedToken() {
		r.session, r.owner = n.sess.Load(), h.owner
	}
	req := &transportpb.RenewRequest{Name: r.name, Token: r.token, Session: r.session, Owner: []byte(r.owner)}
	var st keepaliveStatus
	if lead == n.id {
		st = n.awaitConfirmed(ctx, keepaliveWaiter{name: r.name, token: r.token, session: r.session, owner: r.owner,
			renew: true})
	} else {
		resp, err := n.tr.Renew(ctx, lead, req)
		if err != nil || resp.GetStatus() == transportpb.KeepaliveStatus_KEEPALIVE_STATUS_UNSPECIFIED {
			return fmt.Errorf("%w: %v", lockerr.ErrUnavailable, err)
		}
		st = keepaliveStatus(resp.GetStatus())
	}
	switch st {
	case keepaliveOK:
		// The lease's timer, armed for the deadline it last saw, finds
		// the later one when it fires and re-arms.
		h.lease.base.Advance(sent)
		if cause := h.endCause(); cause != nil {
			// Its deadline passed before the answer came: lost is lost.
			return fmt.Errorf("%w: %w", lockerr.ErrNotHeld, cause)
		}
		return nil
	case keepaliveNoSession:
		return lockerr.ErrNotHeld
	}
	return lockerr.ErrUnavailable
}
