package node

import (
	"errors"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/lockfsm"
)

// Remote raft messages on their way into the loop: each is judged by the
// guard (guard.go) against raft's state, a forwarded proposal's commands are
// authorised (authz.go), and heartbeats that arrive after an append in the
// same turn wait for the end of the turn.

// stepRemote judges messages from peers and steps those that pass (loop).
// raft's state is read once and again only after a message that may have
// changed it (a leader's append response or heartbeat response of the
// current term cannot: the common case on a loaded leader).
func (n *Node) stepRemote(msgs []*raftpb.Message) {
	g := &n.loop.guard
	v := g.view(n.rn, n.id)
	var checked uint64 // the last sender whose role was checked, and passed
	for _, m := range msgs {
		if from := m.GetFrom(); from != checked {
			// The transport admits raft streams from voter certificates
			// only; checked again for every path into the loop.
			if role, ok := n.tr.PeerRole(from); !ok || !role.Voter() {
				n.tr.Refuse(refusedRaft, views.MemberID(from).String(), "type", m.GetType().String(), "reason", "no voter role",
					"role", role.String())
				continue
			}
			checked = from
		}
		if m.GetType() == raftpb.MessageType_MsgHeartbeat && g.appStepped {
			g.deferred = append(g.deferred, m)
			continue
		}
		v.lastIndex = g.lastIndex
		if !n.admit(m, v) || n.loop.yield.Drop(n.clock.Now(), m) {
			continue
		}
		if m.GetType() == raftpb.MessageType_MsgApp || m.GetType() == raftpb.MessageType_MsgSnap {
			g.appStepped = true
		}
		n.step([]*raftpb.Message{m})
		if !(m.GetTerm() == v.term && (m.GetType() == raftpb.MessageType_MsgAppResp ||
			m.GetType() == raftpb.MessageType_MsgHeartbeatResp)) {
			v = g.view(n.rn, n.id)
		}
	}
}

// admit reports whether a remote message may be stepped, judged against
// raft's state v, refusing (and logging once per sender and interval) the
// others.
func (n *Node) admit(m *raftpb.Message, v raftView) bool {
	err := checkRemote(m, v)
	if err == nil && m.GetType() == raftpb.MessageType_MsgProp {
		err = n.authoriseProposal(m)
	}
	if err == nil && m.GetType() == raftpb.MessageType_MsgApp {
		// Cut before a configuration change no leader proposes; the rest
		// is stepped (privilege.ConfLedger).
		if cut := n.loop.guard.confs.TrimAppend(m, n.loop.confState, n.loop.lastApplied, v.lastIndex); cut != nil {
			n.tr.Refuse(refusedRaft, views.MemberID(m.GetFrom()).String(), "type", m.GetType().String(), "term", m.GetTerm(), "err", fmt.Errorf("%w: %v", errGuard, cut))
		}
	}
	switch {
	case errors.Is(err, errStale):
		n.log.Debug("stale raft message dropped", "from", views.MemberID(m.GetFrom()), "type", m.GetType().String(), "err", err)
		return false
	case err != nil:
		n.tr.Refuse(refusedRaft, views.MemberID(m.GetFrom()).String(), "type", m.GetType().String(), "term", m.GetTerm(), "err", err)
		return false
	}
	return true
}

// authoriseProposal keeps the entries of a forwarded proposal that the
// sender may propose (its own sessions' commands) and refuses the message if
// one may not be; entries of a session the leader cannot place yet
// (sessionOwner) are dropped quietly: the proposer retries.
func (n *Node) authoriseProposal(m *raftpb.Message) error {
	keep := m.Entries[:0]
	cmd := &n.loop.proposed // its strings point into the entry's data: read here, never kept
	defer cmd.Reset()
	for _, e := range m.GetEntries() {
		if err := lockfsm.DecodeCommandView(e.GetData(), cmd); err != nil {
			return fmt.Errorf("%w: undecodable command: %v", errGuard, err)
		}
		switch err := n.authorise(m.GetFrom(), cmd); {
		case err == nil:
			keep = append(keep, e)
		case errors.Is(err, errUnknownSession):
		case errors.Is(err, lockerr.ErrQuotaExceeded):
			// Only this command: the member's others (a release that
			// frees room) go on.
			n.tr.Refuse(refusedRaft, views.MemberID(m.GetFrom()).String(), "type", m.GetType().String(), "err", err)
		default:
			return err
		}
	}
	clear(m.Entries[len(keep):])
	m.Entries = keep
	return nil
}

// endOfTurn runs after the turn's Readys (loop): a received snapshot raft
// did not take is discarded, and the heartbeats that waited for raft's last
// index to be exact again are judged now. true: it stepped messages, so
// there may be Readys to handle.
func (n *Node) endOfTurn() bool {
	n.loop.snapIn.dropUnaccepted()
	g := &n.loop.guard
	if len(g.deferred) == 0 {
		return false
	}
	d := g.deferred
	g.deferred = nil
	n.stepRemote(d) // after a Ready appStepped is false: they are judged, not deferred again
	clear(d)
	return true
}
