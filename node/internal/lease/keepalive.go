package lease

import (
	"slices"
	"time"

	"github.com/lockraft/lockraft/lockfsm"
)

// Keepalives and renewals reach the leader, which acknowledges them only
// after a quorum has answered a confirmation round issued after they
// arrived (the node's confirm.go; F1 in doc.go). The node calls NoteArrival
// when a keepalive arrives and Keepalive or Renew once its round is
// confirmed, then FlushRevives.

// NoteArrival moves a session's base when one of its keepalives arrives,
// before its confirmation round: the base only needs to be no earlier than
// what is acknowledged, and a keepalive on its way is not silence.
func (e *Engine) NoteArrival(session uint64, recv time.Time) {
	l := &e.lead
	if !l.active {
		return
	}
	if t := l.sessions[session]; t != nil && t.proposedAt.IsZero() && t.ackable(recv) {
		t.hear(recv)
	}
}

// Keepalive answers one confirmed session keepalive (rule R: it may be held
// back until a revive is applied; the revive is among the commands the next
// FlushRevives or Tick returns). Before Ready it waits for Ready.
func (e *Engine) Keepalive(k Keepalive) {
	if !e.leader {
		k.Reply(NotLeader)
		return
	}
	if !e.lead.active {
		// Not ready yet: the lock table and the marks are not complete.
		e.lead.early = append(e.lead.early, k)
		return
	}
	e.lead.keepalive(e, k)
}

func (l *duties) keepalive(e *Engine, k Keepalive) {
	t := l.sessions[k.Session]
	if t == nil || !t.proposedAt.IsZero() {
		// Unknown, or its expiry is already proposed: acknowledging now
		// would let the holder believe in a session that is ending.
		k.Reply(NoSession)
		return
	}
	t.hear(k.Recv)
	if t.ackable(k.Recv) || e.cfg.Knobs.AckWhileMarked {
		k.Reply(OK)
		return
	}
	t.parked = append(t.parked, k)
	if len(t.parked) == 1 {
		l.revive = append(l.revive, k.Session)
	}
}

// FlushRevives returns the one entry marking live the sessions whose
// keepalives are held back (rule R), if any: the node calls it after
// answering a batch of keepalives.
func (e *Engine) FlushRevives(now time.Time) []lockfsm.Command {
	return e.lead.flushRevives(now)
}

func (l *duties) flushRevives(now time.Time) []lockfsm.Command {
	if len(l.revive) == 0 || !l.active {
		return nil
	}
	slices.Sort(l.revive)
	ids := slices.Compact(l.revive)
	l.revive = nil
	tag := l.ckSeq + 1
	var marks []lockfsm.Checkpoint
	for _, id := range ids {
		t := l.sessions[id]
		if t == nil || len(t.parked) == 0 {
			continue
		}
		marks = append(marks, lockfsm.Checkpoint{Session: id, Live: true})
		t.ckAt, t.ckTag = now, tag
	}
	if len(marks) == 0 {
		return nil
	}
	l.ckSeq = tag
	return []lockfsm.Command{{Kind: lockfsm.KindCheckpoint, Token: l.term, Seq: tag, Checkpoints: marks}}
}

// Renew restarts, on the leader, the lease of a hold whose renewal arrived
// at recv and whose confirmation round is answered, if the hold (name,
// token, and for a hold that may share its token, session and owner) still
// has it.
func (e *Engine) Renew(name string, token, session uint64, owner string, recv time.Time) Status {
	l := &e.lead
	if !e.leader || !l.active {
		return NotLeader
	}
	d := l.findLease(name, token, session, owner)
	if d == nil || !d.proposedAt.IsZero() {
		return NoSession
	}
	if recv.After(d.heard) {
		d.heard = recv
	}
	if at := recv.Add(d.ttl); at.After(d.at) {
		d.at = at
		l.queue.schedule(d, at)
	}
	return OK
}
