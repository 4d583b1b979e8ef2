package node

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node/internal/forward"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// ownSession is this node's session: every lock it holds or waits for
// belongs to it (ephemeral ownership). Owned by the loop goroutine, except
// lastAcked which the keepalive sender updates.
type ownSession struct {
	id         uint64
	nonce      uint64    // tells our OpenSession apart from replayed or older ones
	openSentAt time.Time // first real send of the current nonce's OpenSession (zero: none yet)
	openRetry  time.Time // last (re)proposal of it
	closing    bool
	closeDone  chan error
	toClose    map[uint64]time.Time // sessions to close (older incarnations, duplicates), last proposal
	earlier    uint64               // a light member's session before its restart (restart.go)
	leased     []*grantLease        // grants with their own lease, checked each tick (holder.go)
	// ctx is the open session's context, the parent of all its Holds; its
	// timer cancels it at the holder deadline (holder.go).
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// retrySessionOpen proposes OpenSession while the node has none.
func (n *Node) retrySessionOpen(now time.Time) {
	s := &n.loop.own
	for id, at := range s.toClose {
		if now.IsZero() || now.Sub(at) >= n.cfg.RetryInterval {
			n.proposeSessionless(lockfsm.Command{Kind: lockfsm.KindCloseSession, Session: id})
			s.toClose[id] = n.clock.Now()
		}
	}
	light := n.light()
	if s.id != 0 || s.closing || (n.loop.leader == 0 && !light) {
		return
	}
	if !s.openRetry.IsZero() && !now.IsZero() && now.Sub(s.openRetry) < n.cfg.RetryInterval {
		return
	}
	if s.nonce == 0 {
		s.nonce = sessionNonce()
		s.openSentAt = time.Time{}
	}
	// Earlier incarnations' sessions end first, in the same batch.
	n.closeEarlierSessions()
	s.openRetry = n.clock.Now()
	// The holder's first deadline counts from the first send that could
	// reach a leader (the leader arms its deadline when it applies the
	// open, which is later). Not from the first attempt: a member that
	// starts before the cluster exists would otherwise get a session whose
	// deadline has already passed, and give it up at once.
	if light {
		target := n.fwd.Target()
		if target == 0 {
			return
		}
		if s.openSentAt.IsZero() {
			s.openSentAt = n.clock.Now()
		}
		n.lastSent.Advance(n.clock.Now())
		n.fwd.Open(s.nonce, target)
		return
	}
	if s.openSentAt.IsZero() {
		s.openSentAt = n.clock.Now()
	}
	n.lastSent.Advance(n.clock.Now())
	n.proposeSessionless(lockfsm.Command{
		Kind:      lockfsm.KindOpenSession,
		Node:      n.id,
		TTLMillis: uint64(n.cfg.SessionTTL.Milliseconds()),
		Seq:       s.nonce,
	})
}

// proposeSessionless proposes a command outside the session's sequence
// (session open/close, leader expiries). These are idempotent by nature.
func (n *Node) proposeSessionless(c lockfsm.Command) {
	if n.light() {
		n.fwd.Forward(c.AppendEncode(nil))
		return
	}
	if n.loop.isLeader {
		// A follower's close gets its limit from the leader (loop.go), the
		// one that knows every member's version.
		n.withRunLimit(&c)
	}
	n.loop.props.add(c.AppendEncode(nil), nil)
}

// onSessionOpenedEvent notices our own session opening.
func (n *Node) onSessionOpenedEvent(_ uint64, ev *lockfsm.Event) {
	s := &n.loop.own
	if ev.Node != n.id {
		return
	}
	if s.id == 0 && s.nonce != 0 && ev.Seq == s.nonce && !s.closing {
		s.id = ev.Session
		s.nonce = 0
		n.lastAcked.Advance(s.openSentAt)
		n.watchOwnSession()
		n.sess.set(s.id)
		if n.light() {
			if err := recordSession(n.cfg.DataDir, s.id); err != nil {
				n.log.Warn("could not record the session id; a restart will leave it to expire by TTL", "session", s.id, "err", err)
			}
		}
		n.log.Info("session opened", "session", s.id)
		// Sessions of earlier incarnations of this node hold locks for
		// callers that no longer exist: release them now rather than at TTL.
		for _, si := range n.fsm.Sessions() {
			if si.Node == n.id && si.Session != s.id {
				s.toClose[si.Session] = time.Time{}
			}
		}
		n.onSessionOpen()
		return
	}
	if ev.Session != s.id {
		// A duplicate of our open (a retry that also committed) or a late
		// one from an earlier incarnation.
		s.toClose[ev.Session] = time.Time{}
	}
}

// onOwnSessionEnded: our session was closed (by Close) or expired.
func (n *Node) onOwnSessionEnded(ev *lockfsm.Event) {
	s := &n.loop.own
	delete(s.toClose, ev.Session)
	if ev.Session != s.id {
		return
	}
	if s.closing {
		s.id = 0
		s.endSessionCtx(lockerr.ErrClosed)
		n.sess.set(0)
		n.loop.ops.failAll(lockerr.ErrClosed)
		n.loop.holds.loseAll(lockerr.ErrClosed)
		if s.closeDone != nil {
			s.closeDone <- nil
			s.closeDone = nil
		}
		return
	}
	n.log.Warn("session ended by the cluster; opening a new one", "session", s.id)
	n.resetSession(lockerr.ErrSessionExpired)
}

// resetSession abandons the current session: every hold is lost, every
// pending call fails with cause, and a new session is opened.
func (n *Node) resetSession(cause error) {
	s := &n.loop.own
	if s.id != 0 {
		s.toClose[s.id] = time.Time{}
	}
	s.id = 0
	s.endSessionCtx(cause)
	n.sess.set(0)
	s.leased = nil
	n.loop.ops.failAll(cause)
	n.loop.holds.loseAll(cause)
	n.loop.ops.init()
	n.retrySessionOpen(time.Time{})
}

// closeOwnSession starts a graceful close: one CloseSession entry releases
// every lock and removes every waiter of this node.
func (n *Node) closeOwnSession(done chan error) {
	s := &n.loop.own
	s.closing = true
	n.closing.Store(true)
	for _, o := range n.loop.ops.unsessioned {
		n.loop.ops.complete(o, opResult{err: lockerr.ErrClosed})
	}
	n.loop.ops.unsessioned = nil
	if s.id == 0 {
		done <- nil
		return
	}
	// Tell the holders before the release is proposed: once the close
	// commits, another node may be granted their locks at once. For the
	// same reason no waiter may become a holder from now on: the queued
	// Lock calls fail now (the close removes their waiters), and an Acquire
	// still in flight fails when its result is applied (onAcquireResult).
	n.loop.holds.loseAll(lockerr.ErrClosed)
	for seq, o := range n.loop.ops.queued {
		n.loop.ops.complete(o, opResult{err: lockerr.ErrClosed})
		delete(n.loop.ops.queued, seq)
	}
	s.closeDone = done
	s.toClose[s.id] = time.Time{}
	n.retrySessionOpen(time.Time{})
}

// keepaliveLoop sends this node's keepalive to the leader every
// KeepaliveInterval. Keepalives are not logged; only the leader keeps
// deadlines. An acknowledgement moves the holder-side deadline forward from
// the time the keepalive was sent.
func (n *Node) keepaliveLoop() {
	defer n.bgwg.Done()
	tick, stop := n.clock.NewTicker(n.cfg.KeepaliveInterval)
	defer stop()
	// A call to a leader that has been replaced meanwhile is abandoned, as
	// is every call once Close begins (Close does not wait for it). The
	// watches are set once per leader, not once per call: a context.AfterFunc
	// on a channel is a goroutine, and waking two of them per keepalive was a
	// fifth of an idle light member's wake-ups (bench/cmd/embedcost).
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	defer context.AfterFunc(ctxDone(n.stopc), cancelBase)()
	epoch := n.lead.changed()
	epochCtx, cancelEpoch := context.WithCancel(base)
	unwatch := context.AfterFunc(ctxDone(epoch), cancelEpoch)
	defer func() { unwatch(); cancelEpoch() }()
	for {
		select {
		case <-n.stopc:
			return
		case <-n.donec:
			// The loop stopped (a storage failure): stop keeping the
			// session alive so the cluster expires it and its locks move on.
			return
		case <-tick:
		case <-epoch:
			// A new leader: tell it at once rather than at the next tick,
			// so that back-to-back failovers cost a session as little as
			// possible (leaderfail.go).
		}
		if e := n.lead.changed(); e != epoch {
			unwatch()
			cancelEpoch()
			epoch = e
			epochCtx, cancelEpoch = context.WithCancel(base)
			unwatch = context.AfterFunc(ctxDone(epoch), cancelEpoch)
		}
		n.k.Pause(n.stopc)
		sess, lead := n.sess.Load(), n.lead.Load()
		if sess == 0 || lead == 0 {
			continue
		}
		sent := n.clock.Now()
		n.lastSent.Advance(sent)
		ctx, cancel := context.WithTimeout(epochCtx, n.cfg.keepaliveTimeout())
		st := n.sendKeepalive(ctx, lead, sess)
		cancel()
		switch st {
		case keepaliveOK:
			n.lastAcked.Advance(sent)
			if m := n.cfg.Metrics; m != nil && m.Keepalive != nil {
				m.Keepalive(n.clock.Now().Sub(sent))
			}
		case keepaliveNotLeader, keepaliveFailed:
			if n.light() {
				n.tryDo(func() { n.fwd.LeaderLost(lead) })
			}
		case keepaliveNoSession:
			_ = n.do(context.Background(), func() {
				if n.loop.own.id == sess && !n.loop.own.closing {
					n.log.Warn("leader does not know our session; opening a new one", "session", sess)
					n.resetSession(lockerr.ErrSessionExpired)
				}
			})
		}
	}
}

type keepaliveStatus byte

const (
	keepaliveOK keepaliveStatus = iota + 1
	keepaliveNotLeader
	keepaliveNoSession
	keepaliveFailed
	keepaliveDenied // not the caller's own session or hold; never sent on the wire
)

func (n *Node) sendKeepalive(ctx context.Context, lead, sess uint64) keepaliveStatus {
	if lead == n.id {
		// Served in this node's loop like a call from another member, once
		// the leader confirmed its leadership with a quorum (confirm.go).
		return n.awaitConfirmed(ctx, keepaliveWaiter{session: sess})
	}
	req := &transportpb.KeepaliveRequest{Session: sess}
	resp, err := n.tr.Keepalive(ctx, lead, req)
	if err != nil || resp.GetStatus() == transportpb.KeepaliveStatus_KEEPALIVE_STATUS_UNSPECIFIED {
		return keepaliveFailed
	}
	return keepaliveStatus(resp.GetStatus())
}

// onRestored reconciles the node's callers with a lock table that was just
// replaced by a snapshot from the leader at index: events for the entries
// the snapshot covers were never seen here. What the snapshot lacks is gone
// only if it is older than the snapshot: a session opened after it (ids are
// the OpenSession's index), a grant after it (tokens are indexes) or a
// waiter queued after it come with the entries that follow the snapshot. A
// light member promoted to learner restores the leader's latest snapshot,
// often older than its session and its newest grants.
func (n *Node) onRestored(index uint64) {
	n.loop.observe.onRestored()
	s := &n.loop.own
	if s.id == 0 || s.id > index {
		return
	}
	alive := false
	for _, si := range n.fsm.Sessions() {
		if si.Session == s.id {
			alive = true
			break
		}
	}
	if !alive {
		n.resetSession(lockerr.ErrSessionExpired)
		return
	}
	for k := range n.loop.holds.held {
		li, ok := n.fsm.Lock(k.name)
		found := false
		for _, h := range li.Holds {
			if ok && h.Session == s.id && h.Owner == k.owner && h.Mode == k.mode && h.Token == k.token {
				found = true
				break
			}
		}
		if !found && k.token <= index {
			n.loop.holds.lose(k, lockerr.ErrSessionExpired)
		}
	}
	r := &n.loop.ops
	for seq, o := range r.queued {
		li, ok := n.fsm.Lock(o.cmd.Name)
		if s.id == 0 {
			return // given up while handing out a grant below
		}
		if tok := forward.GrantedTo(li, s.id, o.cmd.Owner, seq); ok && tok != 0 {
			if o.granted == nil {
				n.handOut(o, tok, true)
			}
			continue
		}
		waiting := false
		for _, w := range li.Waiters {
			if w.Session == s.id && w.Seq == seq {
				waiting = true
				break
			}
		}
		// Queued after the snapshot (o.index > index), or as a light
		// member, which is not told the index (0): the entries after the
		// snapshot carry it. While light, it asked the leader every
		// forward.WaitCheck about waits it heard nothing of, so one that
		// ended unheard before the snapshot is no likelier than a lost
		// push.
		if !waiting && o.index != 0 && o.index <= index {
			delete(r.queued, seq)
			r.complete(o, opResult{err: lockerr.ErrSessionExpired})
		}
	}
}

// sessionNonce tells this node's OpenSession apart from any other: random,
// odd (never 0). From crypto/rand, which a simulation seeds (cryptotest).
func sessionNonce() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand.Read)
	return binary.LittleEndian.Uint64(b[:]) | 1
}
