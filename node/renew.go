package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// Renewals travel in two formats. methodRenew (token, name) is the version-1
// one, which every version's leader understands: holds that own their token
// (mutex, writer, election, multi-name) use it. methodRenewHold (token,
// session, owner, name) names the holder too: readers and semaphore permits
// granted in one entry share a token, so the leader needs the holder to
// renew the right one. Such holds exist only once every member runs the
// catalogue (ErrOlderMembers), so no leader that lacks it is ever asked.
const (
	methodRenew     = "renew"
	methodRenewHold = "renew-hold"
)

func encodeRenew(name string, token uint64) []byte {
	b := make([]byte, 8, 8+len(name))
	binary.BigEndian.PutUint64(b, token)
	return append(b, name...)
}

func decodeRenew(b []byte) (string, uint64, error) {
	if len(b) < 9 {
		return "", 0, errors.New("lockraft: bad renew request")
	}
	return string(b[8:]), binary.BigEndian.Uint64(b), nil
}

type renewRequest struct {
	name, owner    string
	token, session uint64
}

func encodeRenewHold(r renewRequest) []byte {
	b := make([]byte, 0, 24+len(r.name)+len(r.owner))
	b = binary.AppendUvarint(b, r.token)
	b = binary.AppendUvarint(b, r.session)
	b = appendStr(b, r.owner)
	return appendStr(b, r.name)
}

func decodeRenewHold(b []byte) (renewRequest, error) {
	rd := uvReader{b: b, ok: true}
	r := renewRequest{token: rd.u(), session: rd.u()}
	r.owner, r.name = rd.s(), rd.s()
	if !rd.ok || len(rd.b) != 0 || r.name == "" || r.session == 0 {
		return renewRequest{}, errors.New("lockraft: bad renew-hold request")
	}
	return r, nil
}

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
	method, req := methodRenew, []byte(nil)
	// The leader files the lease under the name of the request that was
	// granted (a reentrant LockAll may list the names in another order).
	r := renewRequest{name: h.lease.filed, token: h.token}
	if h.sharedToken() {
		r.session, r.owner = n.sess.Load(), h.owner
		method, req = methodRenewHold, encodeRenewHold(r)
	} else {
		req = encodeRenew(r.name, h.token)
	}
	var st keepaliveStatus
	if lead == n.id {
		st = n.localRenew(ctx, r)
	} else if !n.cfg.Faults.allowsOut(lead) {
		return ErrUnavailable
	} else if !n.cfg.Faults.callFault(ctx, lead, func() {
		dctx, cancel := context.WithTimeout(context.Background(), n.cfg.KeepaliveInterval)
		defer cancel()
		_, _ = n.tr.Call(dctx, lead, method, req)
	}) {
		return ErrUnavailable
	} else {
		resp, err := n.tr.Call(ctx, lead, method, req)
		if err != nil || len(resp) != 1 {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		st = keepaliveStatus(resp[0])
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

func (n *Node) localRenew(ctx context.Context, r renewRequest) keepaliveStatus {
	return n.awaitConfirmed(ctx, keepaliveWaiter{name: r.name, token: r.token, session: r.session, owner: r.owner,
		renew: true})
}
