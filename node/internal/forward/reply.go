package forward

// Results in the reply of a forwarded proposal.
//
// A light member's command used to cost the leader two calls: the member's
// FwdPropose, answered at once, and a FwdPush of the result once the
// command was applied. Most commands are applied within a commit or two, so
// the leader holds the FwdPropose call open until the results of the
// commands it carried are applied (at most ReplyWait) and answers with
// them: one call per command batch instead of two. What comes later (the
// results of slow commands, a grant from the queue after the Acquire's
// Queued result, lease and session events) is pushed as before.
//
// Order: while a reply is open for a member, that member's events go into
// the reply too, after the results applied before them, so the member sees
// them in apply order. If the member's sender still has an earlier push
// queued or in flight when the reply is due, the reply's items are queued
// behind it instead and the reply carries none. The remaining race, a push
// sent after the reply but handled by the member first, only delays: a
// grant event that finds no queued Acquire is dropped and re-learned through
// FwdStatus, and the holder-side deadlines (session, lease) count from the
// member's own send times whatever order items arrive in.

import (
	"time"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// maxClosers bounds the leader's memory of forwarded CloseSessions awaiting
// their result (a member has a handful at most).
const maxClosers = 4096

// replyWaiter is a FwdPropose call held open for its results.
type replyWaiter struct {
	node  uint64
	want  map[uint64]bool // seqs of the member's session still without a result
	sess  uint64
	items []*transportpb.PushItem // in apply order
	reply chan *transportpb.FwdProposeResponse
	at    time.Time
}

// ReplyWait is how long the leader holds a fwd-propose call for its
// results: well inside the member's call timeout (RetryInterval), checked
// ten times per tick (the leader's fine ticker).
func (s *State) ReplyWait() time.Duration { return s.cfg.RetryInterval / 4 }

// ProposeOnLeader serves a light member's FwdPropose: it proposes the
// forwarded commands and opens a reply for their results, or answers at
// once with a hint if this node does not lead. Every command is checked
// first (Host.CheckForwarded); if one may not be proposed, none is and the
// error is returned (reply is left unanswered). Commands of a session the
// leader cannot place yet are held back (the member retries).
func (s *State) ProposeOnLeader(from uint64, cmds [][]byte, now time.Time, reply chan *transportpb.FwdProposeResponse) error {
	if !s.leading {
		reply <- &transportpb.FwdProposeResponse{NotLeader: notLeader(s.host.Leader())}
		return nil
	}
	type item struct {
		data []byte
		cmd  lockfsm.Command
		skip bool // held back or answered here
	}
	items := make([]item, 0, len(cmds))
	for _, data := range cmds {
		if len(data) == 0 {
			continue // a probe: the leader answers, others hint
		}
		cmd, known, err := s.host.CheckForwarded(from, data)
		if err != nil {
			return err
		}
		it := item{data: data, cmd: cmd, skip: !known}
		if known && cmd.Kind == lockfsm.KindCloseSession && len(s.closers) < maxClosers {
			s.closers[cmd.Session] = from
		}
		items = append(items, it)
	}
	if old := s.replies[from]; old != nil {
		s.flushReply(old) // one call at a time per member; answer the older one now
	}
	w := &replyWaiter{node: from, want: map[uint64]bool{}, reply: reply, at: now}
	for _, it := range items {
		if it.skip {
			continue
		}
		cmd := it.cmd
		// An entry this leader cannot read was refused above (malformed, or
		// of a newer format, which would stop every replica of this version
		// at it); a catalogue command is answered with the version gate's
		// error while the gate is shut.
		if err := s.host.Admit(it.data); err != nil {
			if cmd.Session != 0 && cmd.Seq != 0 {
				w.items = append(w.items, ResultItem(&cmd, lockfsm.Result{Err: err}, s.cfg.ErrCode(err)))
			}
			continue
		}
		s.host.Propose(it.data)
		if cmd.Session == 0 || cmd.Seq == 0 {
			continue // sessionless: no result for the member
		}
		if w.sess != 0 && w.sess != cmd.Session {
			continue // one session per member; anything else is pushed
		}
		w.sess = cmd.Session
		w.want[cmd.Seq] = true
	}
	if len(w.want) == 0 {
		reply <- &transportpb.FwdProposeResponse{Items: w.items}
		return nil
	}
	s.replies[from] = w
	return nil
}

// toReply adds a push item for node to its open reply, if there is one;
// false means push it. A result completes a wanted seq; the reply is sent
// once none is left, at the end of the applied batch (FlushReplies).
func (s *State) toReply(node uint64, item *transportpb.PushItem, cmd *lockfsm.Command) bool {
	w := s.replies[node]
	if w == nil {
		return false
	}
	w.items = append(w.items, item)
	if cmd != nil && cmd.Session == w.sess {
		delete(w.want, cmd.Seq)
	}
	return true
}

// FlushReplies answers the replies whose results are all in, after a
// batch of entries is applied, so the events of those entries (applied
// after the results) ride along.
func (s *State) FlushReplies() {
	for _, w := range s.replies {
		if len(w.want) == 0 {
			s.flushReply(w)
		}
	}
}

// flushReply answers w with the items it gathered.
func (s *State) flushReply(w *replyWaiter) {
	delete(s.replies, w.node)
	if len(w.items) == 0 {
		w.reply <- &transportpb.FwdProposeResponse{}
		return
	}
	if p := s.pushers[w.node]; p != nil && p.busy() {
		// An earlier push is still on its way: keep the order.
		for _, it := range w.items {
			p.add(it)
		}
		w.reply <- &transportpb.FwdProposeResponse{}
		return
	}
	w.reply <- &transportpb.FwdProposeResponse{Items: w.items}
}

// ExpireReplies answers the replies that waited ReplyWait (the leader's
// fine ticker); results applied later are pushed.
func (s *State) ExpireReplies(now time.Time) { s.expireReplies(now, false) }

// expireReplies is ExpireReplies; all: answer every reply now (stepping
// down).
func (s *State) expireReplies(now time.Time, all bool) {
	for _, w := range s.replies {
		if all || now.Sub(w.at) >= s.ReplyWait() {
			s.flushReply(w)
		}
	}
}

// Holding reports whether a FwdPropose call is held open for its results
// (the leader's fine ticker runs while one is).
func (s *State) Holding() bool { return len(s.replies) > 0 }
