package node

import (
	"context"
	"fmt"

	"github.com/lockraft/lockraft/transport/transportpb"
)

// Renew restarts the lock's own lease (a lock taken with a lease; every Hold
// of the grant shares it). Renewals go to the leader and are not logged. On
// success the holder-side deadline moves to the renewal's send time plus the
// lease, minus the drift margin.
// It returns ErrNotHeld if the lease already ran out or the lock was lost,
// ErrUnavailable if the leader could not be reached in time (the lease keeps
// running: retry). A Hold without a lease has nothing to renew: nil.
func (h *Hold) Renew(ctx context.Context) error {
	if h.lease == nil {
		return nil
	}
	if h.ctx.Err() != nil || h.released.Load() {
		return fmt.Errorf("%w: %w", ErrNotHeld, context.Cause(h.ctx))
	}
	n := h.n
	lead := n.lead.Load()
	if lead == 0 {
		return ErrUnavailable
	}
	sent := n.clock.Now()
	var st keepaliveStatus
	if lead == n.id {
		st = n.localRenew(ctx, h.name, h.token)
	} else if !n.cfg.Faults.allowsOut(lead) {
		return ErrUnavailable
	} else if !n.cfg.Faults.callFault(ctx, lead, func() {
		dctx, cancel := context.WithTimeout(context.Background(), n.cfg.KeepaliveInterval)
		defer cancel()
		_, _ = n.tr.Renew(dctx, lead, &transportpb.RenewRequest{Name: h.name, Token: h.token})
	}) {
		return ErrUnavailable
	} else {
		resp, err := n.tr.Renew(ctx, lead, &transportpb.RenewRequest{Name: h.name, Token: h.token})
		if err != nil || resp.GetStatus() == transportpb.KeepaliveStatus_KEEPALIVE_STATUS_UNSPECIFIED {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		st = keepaliveStatus(resp.GetStatus())
	}
	switch st {
	case keepaliveOK:
		// The lease's timer, armed for the deadline it last saw, finds
		// the later one when it fires and re-arms.
		h.lease.base.Advance(sent)
		if h.ctx.Err() != nil {
			// Its deadline passed before the answer came: lost is lost.
			return fmt.Errorf("%w: %w", ErrNotHeld, context.Cause(h.ctx))
		}
		return nil
	case keepaliveNoSession:
		return ErrNotHeld
	}
	return ErrUnavailable
}

func (n *Node) localRenew(ctx context.Context, name string, token uint64) keepaliveStatus {
	return n.awaitConfirmed(ctx, keepaliveWaiter{name: name, token: token, renew: true})
}
