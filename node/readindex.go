package node

import (
	"context"
	"time"

	"go.etcd.io/raft/v3"

	"github.com/lockraft/lockraft/node/internal/readctx"
)

// Linearizable reads of the lock table (raft-guide.md §5): a read first asks
// raft for a ReadIndex (the leader's commit index, confirmed by a heartbeat
// round with a quorum; a follower's request goes to the leader and back), then
// waits until this replica has applied that index, then reads its own table.
// The answer therefore reflects every write that had committed when the read
// began, on a follower as on the leader.
//
// Cost: one heartbeat round trip to a quorum (plus the follower→leader hop)
// and no log entry; every read queued while a round is out joins the next
// round, so many concurrent reads share one round. The table itself is read
// inside the loop, after the apply that reached the index.

// readRound is one ReadIndex request in flight.
type readRound struct {
	id     uint64
	issued time.Time
	reads  []pendingRead
}

// pendingRead is one read waiting for its round, then for its index.
type pendingRead struct {
	ctx   context.Context
	index uint64
	run   func()
}

// readIndexState is owned by the loop.
type readIndexState struct {
	next   []pendingRead // waiting for a round
	rounds []readRound   // issued, oldest first
	ready  []pendingRead // index known; run once applied
	id     uint64

	// Set at start.
	rn         *raft.RawNode
	retryAfter time.Duration // RetryInterval
}

// issue starts a round for the queued reads unless one is out that is
// younger than RetryInterval (they join the next round).
func (r *readIndexState) issue(now time.Time) {
	if len(r.next) == 0 {
		return
	}
	if k := len(r.rounds); k > 0 && now.Sub(r.rounds[k-1].issued) < r.retryAfter {
		return
	}
	r.id++
	r.rounds = append(r.rounds, readRound{id: r.id, issued: now, reads: r.next})
	r.next = nil
	// Dropped silently when there is no leader; retry issues another.
	r.rn.ReadIndex(readctx.Encode(readctx.Read, r.id))
}

// answer takes a Ready's read states and runs every read whose index is
// applied (at the end of each Ready, before its issue).
func (r *readIndexState) answer(rss []raft.ReadState, applied uint64) {
	for _, rs := range rss {
		for _, rd := range readctx.Answered(&r.rounds, func(rd readRound) uint64 { return rd.id }, readctx.Read, rs.RequestCtx) {
			for _, p := range rd.reads {
				p.index = rs.Index
				r.ready = append(r.ready, p)
			}
		}
	}
	if len(r.ready) > 0 {
		kept := r.ready[:0]
		for _, p := range r.ready {
			if p.index <= applied {
				p.run()
			} else {
				kept = append(kept, p)
			}
		}
		clear(r.ready[len(kept):])
		r.ready = kept
	}
}

// retry runs every tick, before the tick's issue: rounds unanswered for
// RetryInterval (no leader, a lost message) are queued to be asked again
// with a new id; reads whose caller gave up are dropped.
func (r *readIndexState) retry(now time.Time) {
	if len(r.rounds) == 0 && len(r.next) == 0 {
		return
	}
	var again []pendingRead
	keep := r.rounds[:0]
	for _, rd := range r.rounds {
		if now.Sub(rd.issued) < r.retryAfter {
			keep = append(keep, rd)
			continue
		}
		again = append(again, rd.reads...)
	}
	r.rounds = keep
	live := r.next[:0]
	for _, p := range append(again, r.next...) {
		if p.ctx.Err() == nil {
			live = append(live, p)
		}
	}
	r.next = live
}
