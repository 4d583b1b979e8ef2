package node

// Commit hints: a follower learns that an entry is committed without waiting
// for the leader to hear its acknowledgement and broadcast the new commit
// index.
//
// In Raft an entry of the leader's current term is committed once a quorum
// has it on disk (§5.4.2); the leader finds out when the acknowledgements
// arrive, and the followers one hop after that. When the quorum is two (two
// or three voters, no joint configuration) the leader and any one follower
// form it, so once its own fdatasync returns the leader tells each
// follower "I (leader of term T) have my log durable through index j". A
// follower that has, in term T, made its own log durable through index x
// (entry x of term T, so its log matches the leader's through x) knows that
// everything through min(j, x) is on a quorum's disks, i.e. committed, and
// advances its commit index there itself: a caller on a follower gets its
// result about two network hops sooner (the acknowledgement and the commit
// notice), and a lock handed to a waiter on a follower reaches it as soon as
// that follower's own disk write returns.
//
// Safety rests on the same facts as the leader's own commit rule:
//   - the leader only hints while its configuration is simple with at most
//     three voters and no configuration change is unapplied (none in the log
//     beyond its applied index, and the first entry of its term applied), so
//     the leader and the follower are a quorum of the configuration in force;
//   - j and x are indexes of entries of term T, each reported durable by the
//     node's own appender (MsgStorageAppendResp of term T); in term T neither
//     log is ever overwritten, and a follower whose term moved past T ignores
//     the hint;
//   - the follower applies nothing it has not itself made durable (raft with
//     AsyncStorageWrites only applies stable entries).
//
// Stepping the built heartbeat also restarts the follower's election timer,
// as any message from the leader does; it is built only on the leader's
// hint or on the follower making an append from that leader durable.
//
// A hint never costs a message of its own: it rides along with whatever
// the leader sends that follower next (under load, the next append), and a
// later hint replaces one still waiting. Sent on its own it bought nothing
// on two shared cores: the extra writes cost the leader's callers what the
// followers' callers gained (commit hints branch).
//
// On the wire a hint is a MsgHeartbeat with Commit unset, the index in Index
// and commitHintContext as Context. A node that does not know hints steps it
// as a heartbeat that commits nothing. The follower moves its commit index by
// stepping a heartbeat it builds itself (Commit = min(j, x), the leader as
// From), whose MsgHeartbeatResp it drops.

import (
	"bytes"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/lockraft/lockraft/raftlog"
)

var commitHintContext = []byte("lockraft/commit-hint")

// commitHints is the loop's hint state.
type commitHints struct {
	// durableTerm and durableIndex: this node's log is durable through
	// durableIndex, whose entry is of term durableTerm (the latest term
	// reported by the appender).
	durableTerm, durableIndex uint64
	// leader, leaderTerm, leaderIndex: the latest hint from the leader (on a
	// follower): leader's log is durable through leaderIndex in leaderTerm.
	leader, leaderTerm, leaderIndex uint64
	// confIndex is the highest index of a configuration change this node has
	// handed to its appender.
	confIndex uint64
	pending   []*raftpb.Message // leader: hints for this turn's messages
	sent      uint64            // Status
	used      uint64            // Status: hints that moved the commit index

	// Set at start.
	id      uint64
	off     bool // Config.NoCommitHints
	rn      *raft.RawNode
	storage raftlog.Log
}

func isCommitHint(m *raftpb.Message) bool {
	return bytes.Equal(m.GetContext(), commitHintContext) &&
		(m.GetType() == raftpb.MessageType_MsgHeartbeat || m.GetType() == raftpb.MessageType_MsgHeartbeatResp)
}

// noteAppended records the configuration changes among entries handed to
// the appender (loop).
func (h *commitHints) noteAppended(m *raftpb.Message) {
	for _, e := range m.GetEntries() {
		if t := e.GetType(); t == raftpb.EntryType_EntryConfChange || t == raftpb.EntryType_EntryConfChangeV2 {
			h.confIndex = max(h.confIndex, e.GetIndex())
		}
	}
}

// durable records that this node's log is durable through m's index in
// m's term (a MsgStorageAppendResp); ok false if m says nothing new.
func (h *commitHints) durable(m *raftpb.Message) (term, idx uint64, ok bool) {
	idx, term = m.GetIndex(), m.GetLogTerm()
	if idx == 0 || term != m.GetTerm() {
		return 0, 0, false // no entries, or appended in an earlier term (raft ignores those too)
	}
	switch {
	case term > h.durableTerm:
		h.durableTerm, h.durableIndex = term, idx
	case term == h.durableTerm:
		h.durableIndex = max(h.durableIndex, idx)
	default:
		return 0, 0, false
	}
	return term, idx, true
}

// commitHintQuorum reports whether, in cs, the leader and any one voter are
// a quorum: a simple configuration of two or three voters.
func commitHintQuorum(cs *raftpb.ConfState) bool {
	v := len(cs.GetVoters())
	return (v == 2 || v == 3) && len(cs.GetVotersOutgoing()) == 0
}

// queue queues "durable through idx in term" for every follower among
// voters that replicates normally, unless the commit index is already
// there (leader's loop, once onDurable found that the configuration allows
// it).
func (h *commitHints) queue(term, idx uint64, voters []uint64) {
	if h.rn.BasicStatus().GetCommit() >= idx {
		return // raft broadcasts this commit itself
	}
	h.rn.WithProgress(func(id uint64, typ raft.ProgressType, pr tracker.Progress) {
		if id == h.id || typ != raft.ProgressTypePeer || pr.State != tracker.StateReplicate || !slices.Contains(voters, id) {
			return
		}
		h.pending = slices.DeleteFunc(h.pending, func(m *raftpb.Message) bool { return m.GetTo() == id })
		h.pending = append(h.pending, newHint(id, h.id, term, idx))
	})
}

// hintBlock is a commit hint and the fields its pointers point to, in one
// allocation (raftpb has a pointer for every scalar field).
type hintBlock struct {
	msg                   raftpb.Message
	typ                   raftpb.MessageType
	to, from, term, index uint64
}

// newHint is the commit hint from → to: commit index idx of term.
func newHint(to, from, term, idx uint64) *raftpb.Message {
	b := &hintBlock{typ: raftpb.MessageType_MsgHeartbeat, to: to, from: from, term: term, index: idx}
	m := &b.msg
	m.Type, m.To, m.From, m.Term, m.Index = &b.typ, &b.to, &b.from, &b.term, &b.index
	m.Context = commitHintContext
	return m
}

// rideAlong appends to out the queued hints for the peers out already has a
// message for, so that a hint never costs a write of its own; the others
// wait for the next message to their peer (a later hint replaces them).
func (h *commitHints) rideAlong(out []*raftpb.Message) []*raftpb.Message {
	if len(h.pending) == 0 {
		return out
	}
	keep := h.pending[:0]
	n := len(out)
	for _, hint := range h.pending {
		if slices.ContainsFunc(out[:n], func(m *raftpb.Message) bool { return m.GetTo() == hint.GetTo() }) {
			out = append(out, hint)
			h.sent++
		} else {
			keep = append(keep, hint)
		}
	}
	clear(h.pending[len(keep):])
	h.pending = keep
	return out
}

// onHint records a leader's hint on a follower (loop) and commits what it
// allows; lastIndex is raft's last index as of the last Ready (guard.go).
func (h *commitHints) onHint(m *raftpb.Message, lastIndex uint64) {
	if m.GetType() != raftpb.MessageType_MsgHeartbeat || h.off {
		return
	}
	if st := h.rn.BasicStatus(); m.GetFrom() != st.Lead || m.GetTerm() != st.GetTerm() {
		return // only the leader raft follows, in its term, hints (guard.go refuses others first)
	}
	if t := m.GetTerm(); t > h.leaderTerm || (t == h.leaderTerm && m.GetFrom() == h.leader) {
		if t > h.leaderTerm {
			h.leaderIndex = 0
		}
		h.leader, h.leaderTerm, h.leaderIndex = m.GetFrom(), t, max(h.leaderIndex, m.GetIndex())
	}
	h.commit(lastIndex)
}

// commit moves the commit index to what hintedCommit allows (loop);
// lastIndex is raft's last index as of the last Ready.
func (h *commitHints) commit(lastIndex uint64) {
	if h.leaderTerm == 0 || h.durableTerm != h.leaderTerm {
		return // nothing to combine (saves the status read)
	}
	c := h.hintedCommit(h.rn.BasicStatus())
	if c == 0 {
		return
	}
	if last, err := h.storage.LastIndex(); err != nil || c > last || c > lastIndex {
		// Cannot happen for durable entries of the leader's term, which are
		// in storage and in raft's log (as of the last Ready: guard.go);
		// never hand raft a commit beyond its log.
		return
	}
	term := h.leaderTerm
	err := h.rn.Step(&raftpb.Message{
		Type:    raftpb.MessageType_MsgHeartbeat.Enum(),
		To:      new(h.id),
		From:    new(h.leader),
		Term:    new(term),
		Commit:  new(c),
		Context: commitHintContext,
	})
	if err == nil {
		h.used++
	}
}

// hintedCommit is the index this node may commit on the leader's hint: the
// smaller of the leader's and its own durable index, if it follows the
// hinting leader in the term both are of; 0 if none, or if its commit index
// is already there.
func (h *commitHints) hintedCommit(st raft.BasicStatus) uint64 {
	term := h.leaderTerm
	if term == 0 || h.durableTerm != term {
		return 0
	}
	if st.RaftState != raft.StateFollower || st.GetTerm() != term || st.Lead != h.leader {
		return 0
	}
	c := min(h.leaderIndex, h.durableIndex)
	if c <= st.GetCommit() {
		return 0
	}
	return c
}
