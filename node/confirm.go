package node

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/lockraft/lockraft/node/internal/lease"
	"github.com/lockraft/lockraft/node/internal/readctx"
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
//
// The heartbeats that confirm rounds name the sessions of every round still
// unanswered: followers remember when they last saw each session in a
// round, which lets a later leader carry a crashed holder's silence over
// (node/internal/lease). A new leader's first rounds also ask the followers
// for those memories.

// keepaliveWaiter is one keepalive or renewal waiting for confirmation.
type keepaliveWaiter struct {
	session uint64 // keepalive: the session; renewal: the holder's session (0: not named)
	name    string // renewal: the lock name
	owner   string // renewal: the holder's owner (with session)
	token   uint64 // renewal: the token it must still hold
	renew   bool
	from    uint64 // the remote member asking (0: this node itself)
	recv    time.Time
	reply   chan keepaliveStatus
}

// confirmer batches waiters behind ReadIndex rounds. Owned by the loop.
//
// Rounds are answered in order: raft releases a ReadIndex together with
// every earlier one, and a round confirmed at its issue time also covers
// every waiter of an earlier round (they all arrived before it was issued).
// So an unanswered round is never failed or dropped for being slow: its
// waiters are answered by the first later round that completes. A new round
// is issued for the waiters that arrived meanwhile once the newest round has
// been out for RetryInterval (or has been answered): under load a round can
// take longer than that, and replacing it by a fresh one each time would
// never confirm anything.
type confirmer struct {
	next   []keepaliveWaiter
	rounds []confirmRound // issued, oldest first
	id     uint64
	// lastIssued: while rounds are frequent (one within the last two
	// heartbeat intervals), a round is issued only on a tick that sent
	// raft's own heartbeats (beat), in the same loop turn, so each follower
	// gets both in one batch and wakes once per heartbeat interval, not
	// once per round. Each round is a heartbeat to every voter and
	// learner: with one keepalive a second from each of 50 members a round
	// per keepalive made the followers' idle CPU four to five times a
	// 3-member cluster's, and a round on every tick kept them at one
	// wake-up per tick whatever HeartbeatTicks said (bench/cmd/embedcost).
	// Keepalives that arrive meanwhile wait for the next heartbeat tick
	// (onTick) and share its round; waiting is safe, as an
	// acknowledgement counts from the keepalive's send time. An occasional
	// keepalive (a small cluster) still starts its round at once.
	lastIssued time.Time
	beat       bool // the current tick sent raft's heartbeats (or could not tell): node.go's run

	// Set at start.
	rn         *raft.RawNode
	lease      *lease.Engine
	retryAfter time.Duration // RetryInterval
	heartbeat  time.Duration // the heartbeat interval
}

type confirmRound struct {
	id       uint64
	issued   time.Time
	waiters  []keepaliveWaiter
	sessions []uint64 // its waiters' sessions, named on the heartbeats that confirm it (lease.go)
}

// awaitConfirmed hands w to the loop and waits for its answer (or ctx).
func (n *Node) awaitConfirmed(ctx context.Context, w keepaliveWaiter) keepaliveStatus {
	w.reply = make(chan keepaliveStatus, 1)
	// Received now, before the loop takes it: after the holder sent it, and
	// before any round the loop issues for it (F1, node/internal/lease).
	// Timing it in the loop would add the loop's queueing to the session's
	// base.
	w.recv = n.clock.Now()
	if err := n.do(ctx, func() {
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

// confirmLeadership adds a waiter and starts a round if it may.
func (n *Node) confirmLeadership(w keepaliveWaiter) {
	if !n.loop.isLeader {
		w.reply <- keepaliveNotLeader
		return
	}
	if w.from != 0 && !n.keepaliveAllowed(w) {
		w.reply <- keepaliveDenied
		return
	}
	c := &n.loop.confirm
	c.next = append(c.next, w)
	if !w.renew {
		c.lease.NoteArrival(w.session, w.recv)
	}
	c.issue(n.loop.term, n.clock.Now(), false)
}

// issue starts a round of this leader's term for the waiting keepalives
// unless the newest round is younger than RetryInterval (they join the next
// one), or, while rounds are frequent, outside a tick (see lastIssued).
func (c *confirmer) issue(term uint64, now time.Time, onTick bool) {
	if len(c.next) == 0 && !c.lease.ReportsWanted() {
		return
	}
	if k := len(c.rounds); k > 0 && now.Sub(c.rounds[k-1].issued) < c.retryAfter {
		return
	}
	if now.Sub(c.lastIssued) < 2*c.heartbeat && (!onTick || !c.beat) {
		return // the next heartbeat tick issues it
	}
	c.lastIssued = now
	var sessions []uint64
	for _, w := range c.next {
		if !w.renew {
			sessions = append(sessions, w.session)
		}
	}
	slices.Sort(sessions)
	sessions = slices.Compact(sessions)
	c.id++
	c.rounds = append(c.rounds, confirmRound{id: c.id, issued: now, waiters: c.next, sessions: sessions})
	c.next = nil
	c.lease.SeeRound(term, sessions, now)
	c.rn.ReadIndex(readctx.Encode(readctx.Keepalive, c.id))
}

// answer answers the waiters of each confirmed round and of every earlier
// one; leading: this node still leads.
func (c *confirmer) answer(rss []raft.ReadState, leading bool) {
	for _, rs := range rss {
		for _, r := range readctx.Answered(&c.rounds, func(r confirmRound) uint64 { return r.id }, readctx.Keepalive, rs.RequestCtx) {
			for _, w := range r.waiters {
				if !leading {
					w.reply <- keepaliveNotLeader
					continue
				}
				if w.renew {
					w.reply <- statusOf(c.lease.Renew(w.name, w.token, w.session, w.owner, w.recv))
				} else {
					c.lease.Keepalive(w.leaseKeepalive())
				}
			}
		}
	}
	if len(c.rounds) == 0 {
		c.rounds = nil
	}
}

// keepaliveAllowed: a member keeps alive only its own sessions and renews
// only its own holds (authz.go). A session or hold the table does not have
// is left to the keepalive itself, which answers "no session".
func (n *Node) keepaliveAllowed(w keepaliveWaiter) bool {
	if w.renew {
		return n.ownsHold(w.from, w.name, w.token, w.session, w.owner) == nil
	}
	return !errors.Is(n.ownsSession(w.from, w.session), errNotYours)
}

// expire runs every tick, before the tick's issue (which starts a round for
// the waiters queued behind a slow one): it answers as failed the waiters
// older than ttl, the session TTL (their callers gave up long ago; without
// a quorum they would otherwise pile up until CheckQuorum makes this leader
// step down).
func (c *confirmer) expire(now time.Time, ttl time.Duration) {
	for len(c.rounds) > 0 && now.Sub(c.rounds[0].issued) >= ttl {
		for _, w := range c.rounds[0].waiters {
			w.reply <- keepaliveFailed
		}
		c.rounds = c.rounds[1:]
	}
}

// failAll answers everyone with NotLeader (on stepping down).
func (c *confirmer) failAll() {
	for _, r := range c.rounds {
		for _, w := range r.waiters {
			w.reply <- keepaliveNotLeader
		}
	}
	for _, w := range c.next {
		w.reply <- keepaliveNotLeader
	}
	c.rounds, c.next = nil, nil
}

// heartbeatExt is this turn's extension for the leader's heartbeats: the
// sessions of every unanswered round, and whether reports are wanted.
func (c *confirmer) heartbeatExt() []byte {
	if len(c.rounds) == 0 && !c.lease.ReportsWanted() {
		return nil
	}
	var sessions []uint64
	for _, r := range c.rounds {
		sessions = append(sessions, r.sessions...)
	}
	return c.lease.HeartbeatExt(sessions)
}
