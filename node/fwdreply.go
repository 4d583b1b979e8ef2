package node

// Results in the reply of a forwarded proposal (light members, fwd.go).
//
// A light member's command used to cost the leader two calls: the member's
// FwdPropose, answered at once, and a FwdPush of the result once the
// command was applied. Most commands are applied within a commit or two, so
// the leader now holds the FwdPropose call open until the results of the
// commands it carried are applied (at most fwdReplyWait) and answers with
// them: one call per command batch instead of two. What comes later (the
// results of slow commands, a grant from the queue after the Acquire's
// Queued result, lease and session events) is pushed as before.
//
// Order: while a reply is open for a member, that member's events go into
// the reply too, after the results applied before them, so the member sees
// them in apply order. If the member's pusher still has an earlier push
// queued or in flight when the reply is due, the reply's items are queued
// behind it instead and the reply carries none. The remaining race, a push
// sent after the reply but handled by the member first, only delays: a
// grant event that finds no queued Acquire is dropped and re-learned through
// FwdStatus, and the holder-side deadlines (session, lease) count from the
// member's own send times whatever order items arrive in.

import (
	"context"
	"errors"
	"time"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// fwdReplyWaiter is a FwdPropose call held open for its results.
type fwdReplyWaiter struct {
	node  uint64
	want  map[uint64]bool // seqs of the member's session still without a result
	sess  uint64
	items []*transportpb.PushItem // in apply order
	reply chan *transportpb.FwdProposeResponse
	at    time.Time
}

// fwdReplyWait is how long the leader holds a fwd-propose call for its
// results: well inside the member's call timeout (RetryInterval), checked
// ten times per tick (the leader's fine ticker).
func (n *Node) fwdReplyWait() time.Duration { return n.cfg.RetryInterval / 4 }

// fwdProposeOnLeader proposes a member's forwarded commands and opens a reply
// for their results (loop, leader). Every command is authorised first
// (authz.go); if one may not be proposed, none is and the error is returned.
// Commands of a session the leader cannot place yet are held back (the
// member retries).
// maxClosers bounds the leader's memory of forwarded CloseSessions awaiting
// their result (a member has a handful at most).
const maxClosers = 4096

func (n *Node) fwdProposeOnLeader(from uint64, cmds [][]byte, reply chan *transportpb.FwdProposeResponse) error {
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
		if len(data) > maxCommandSize {
			return errTooLarge
		}
		cmd, err := lockfsm.DecodeCommand(data)
		if err != nil {
			return errUndecodable
		}
		it := item{data: data, cmd: cmd}
		switch err := n.authorise(from, &cmd); {
		case err == nil:
			if cmd.Kind == lockfsm.KindCloseSession && len(n.loop.fwd.closers) < maxClosers {
				n.loop.fwd.closers[cmd.Session] = from
			}
		case errors.Is(err, errUnknownSession):
			it.skip = true
		default:
			return err
		}
		items = append(items, it)
	}
	f := &n.loop.fwd
	if old := f.replies[from]; old != nil {
		n.fwdFlushReply(old) // one call at a time per member; answer the older one now
	}
	w := &fwdReplyWaiter{node: from, want: map[uint64]bool{}, reply: reply, at: n.clock.Now()}
	for _, it := range items {
		if it.skip {
			continue
		}
		cmd := it.cmd
		// An entry this leader cannot read was refused above (errUndecodable:
		// malformed, or of a newer format, which would stop every replica of
		// this version at it); a catalogue command is answered with
		// ErrOlderMembers while the version gate is shut (versiongate.go).
		if err := n.admitForwarded(it.data, true); err != nil {
			if cmd.Session != 0 && cmd.Seq != 0 {
				w.items = append(w.items, pushResultItem(&cmd, lockfsm.Result{Err: err}))
			}
			continue
		}
		n.proposeEntry(it.data, nil)
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
	f.replies[from] = w
	return nil
}

// fwdToReply adds a push item for node to its open reply, if there is one;
// false means push it. A result completes a wanted seq; the reply is sent
// once none is left, at the end of the applied batch (fwdFlushComplete).
func (n *Node) fwdToReply(node uint64, item *transportpb.PushItem, cmd *lockfsm.Command) bool {
	w := n.loop.fwd.replies[node]
	if w == nil {
		return false
	}
	w.items = append(w.items, item)
	if cmd != nil && cmd.Session == w.sess {
		delete(w.want, cmd.Seq)
	}
	return true
}

// fwdFlushComplete answers the replies whose results are all in, after a
// batch of entries is applied, so the events of those entries (applied
// after the results) ride along.
func (n *Node) fwdFlushComplete() {
	for _, w := range n.loop.fwd.replies {
		if len(w.want) == 0 {
			n.fwdFlushReply(w)
		}
	}
}

// fwdFlushReply answers w with the items it gathered (loop).
func (n *Node) fwdFlushReply(w *fwdReplyWaiter) {
	delete(n.loop.fwd.replies, w.node)
	if len(w.items) == 0 {
		w.reply <- &transportpb.FwdProposeResponse{}
		return
	}
	if p := n.loop.fwd.pushers[w.node]; p != nil && p.busy() {
		// An earlier push is still on its way: keep the order.
		for _, it := range w.items {
			p.add(n, it)
		}
		w.reply <- &transportpb.FwdProposeResponse{}
		return
	}
	w.reply <- &transportpb.FwdProposeResponse{Items: w.items}
}

// fwdExpireReplies answers the replies that waited fwdReplyWait (leader's
// fine ticker);
// results applied later are pushed. all: answer every reply now (stepping
// down).
func (n *Node) fwdExpireReplies(now time.Time, all bool) {
	for _, w := range n.loop.fwd.replies {
		if all || now.Sub(w.at) >= n.fwdReplyWait() {
			n.fwdFlushReply(w)
		}
	}
}

// fwdReplyItems hands the items of a FwdPropose reply to the loop (member
// side, from the calling goroutine).
func (n *Node) fwdReplyItems(items []*transportpb.PushItem) {
	if len(items) == 0 || n.dropPushes() {
		return
	}
	_ = n.do(context.Background(), func() { n.onPush(items) })
}
