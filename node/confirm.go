package node

import (
	"context"
	"encoding/binary"
	"time"

	"go.etcd.io/raft/v3"
)

// Keepalives and lease renewals are acknowledged only after the leader has
// confirmed, through a ReadIndex round with a quorum, that it still leads.
//
// Why: a leader cut off from the majority keeps believing it leads for up to
// an election timeout, while the majority may already have elected another
// leader whose session deadlines started at its own ready moment. If the
// deposed leader acknowledged a keepalive sent after that moment, the holder
// would count its lease from a later send time than the real leader counts
// its deadline from, and could learn of its loss too late (S5). A ReadIndex
// round that a quorum answers proves no other leader had been elected when
// the keepalive was sent, so the new leader's deadline is later.
//
// Every keepalive that arrives while one round is in flight joins the next
// round: one quorum round trip serves many keepalives.

// keepaliveWaiter is one keepalive or renewal waiting for confirmation.
type keepaliveWaiter struct {
	session uint64 // keepalive: the session
	name    string // renewal: the lock name
	token   uint64 // renewal: the token it must still hold
	renew   bool
	recv    time.Time
	reply   chan keepaliveStatus
}

// confirmer batches waiters behind ReadIndex rounds. Owned by the loop.
type confirmer struct {
	next     []keepaliveWaiter
	inflight []keepaliveWaiter
	id       uint64
	issued   time.Time
}

// awaitConfirmed hands w to the loop and waits for its answer (or ctx).
func (n *Node) awaitConfirmed(ctx context.Context, w keepaliveWaiter) keepaliveStatus {
	w.reply = make(chan keepaliveStatus, 1)
	if err := n.do(ctx, func() {
		w.recv = n.clock.Now()
		n.confirmLeadership(w)
	}); err != nil {
		return keepaliveFailed
	}
	select {
	case st := <-w.reply:
		return st
	case <-ctx.Done():
		return keepaliveFailed
	case <-n.donec:
		return keepaliveFailed
	}
}

// confirmLeadership adds a waiter and starts a round if none is in flight.
func (n *Node) confirmLeadership(w keepaliveWaiter) {
	if !n.loop.isLeader {
		w.reply <- keepaliveNotLeader
		return
	}
	c := &n.loop.confirm
	c.next = append(c.next, w)
	n.issueConfirmRound()
}

func (n *Node) issueConfirmRound() {
	c := &n.loop.confirm
	if c.inflight != nil || len(c.next) == 0 {
		return
	}
	c.id++
	var rctx [9]byte
	rctx[0] = 'k'
	binary.BigEndian.PutUint64(rctx[1:], c.id)
	c.inflight, c.next = c.next, nil
	c.issued = n.clock.Now()
	n.rn.ReadIndex(rctx[:])
}

// onReadStates answers the waiters of a confirmed round.
func (n *Node) onReadStates(rss []raft.ReadState) {
	c := &n.loop.confirm
	for _, rs := range rss {
		ctx := rs.RequestCtx
		if len(ctx) != 9 || ctx[0] != 'k' || binary.BigEndian.Uint64(ctx[1:]) != c.id || c.inflight == nil {
			continue // a stale round
		}
		batch := c.inflight
		c.inflight = nil
		for _, w := range batch {
			if !n.loop.isLeader {
				w.reply <- keepaliveNotLeader
				continue
			}
			if w.renew {
				w.reply <- n.loop.lead.renewLease(n, w.name, w.token, w.recv)
			} else {
				w.reply <- n.loop.lead.keepalive(n, w.session, w.recv)
			}
		}
	}
	n.issueConfirmRound()
}

// expireConfirmRounds fails a round that got no answer (the ReadIndex was
// dropped, or no quorum answers) so its callers retry.
func (n *Node) expireConfirmRounds(now time.Time) {
	c := &n.loop.confirm
	if c.inflight != nil && now.Sub(c.issued) >= n.cfg.RetryInterval {
		for _, w := range c.inflight {
			w.reply <- keepaliveFailed
		}
		c.inflight = nil
		n.issueConfirmRound()
	}
}

// failConfirmRounds answers everyone with NotLeader (on stepping down).
func (n *Node) failConfirmRounds() {
	c := &n.loop.confirm
	for _, w := range c.inflight {
		w.reply <- keepaliveNotLeader
	}
	for _, w := range c.next {
		w.reply <- keepaliveNotLeader
	}
	c.inflight, c.next = nil, nil
}
