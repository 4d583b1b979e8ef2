package node

import (
	"errors"
	"fmt"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/confchange"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node/internal/privilege"
	"github.com/lockraft/lockraft/transport"
)

// Raft message guard
//
// raft trusts its input: a heartbeat whose Commit lies beyond the log, a
// MsgApp whose entries are not contiguous, a snapshot whose ConfState cannot
// be restored, a MsgReadIndex without its entry, a proposal with an
// undecodable configuration change, each panics inside raft (and the process
// embedding the node with it). The transport already drops what no remote
// peer may send (raft's local messages, messages naming raft's local
// threads, a sender other than the authenticated peer). What is left is
// judged by the rules here, in the loop (remote.go), against raft's state
// before raft sees it:
//
//   - checkRemote: the shape of each message type and its indexes and terms
//     against what raft can accept without panicking. Every message whose
//     handling moves raft's commit index (a heartbeat) is checked against
//     raft's exact last index, which the guard learns from each Ready (all
//     appends show up in the Ready's MsgStorageAppend); a heartbeat that
//     arrives after a MsgApp or MsgSnap stepped in the same turn (which may
//     have changed the log) waits for the end of that turn's Readys, when
//     the last index is exact again.
//   - who may send at all (fleet.MemberSet): members of the configuration, the
//     founding members, and members gossip reports with raft data; never a
//     member whose removal was applied.
//   - proposals (MsgProp) only at the leader, only normal entries carrying a
//     lock command of the sender's own session (authz.go): configuration
//     changes are proposed only by the leader's own reconcile, never on a
//     peer's word.
//   - the leader-only messages of the current term (a heartbeat, an append, a
//     snapshot, a read-index answer, a campaign order) only from the leader
//     raft follows, once it follows one;
//   - a message that would make this node take a new leader, and a vote
//     request, only from a voter of the applied configuration with a voter
//     certificate; an append's configuration changes only as a leader
//     proposes them (node/internal/privilege).
//
// A refused message is dropped (raft retries what matters) and logged once
// per sender and interval; one a correct peer may send across a leader
// change (errStale) is dropped quietly. As a last line, a panic in the loop stops the
// node with lockerr.ErrInternal instead of killing the process or running on state
// it can no longer trust (recoverLoop, node.go).

// Limits on values raft would take at face value. Indexes and terms far
// below 2^64 leave raft's arithmetic (index+1, term+1) room; real ones are
// below 2^40 after years of heavy use.
const (
	maxRaftValue   = 1 << 62
	maxContextSize = 64 // request contexts (ReadIndex, hints): 9 bytes here
	// maxHeartbeatContext bounds a heartbeat's (or its answer's) context,
	// which carries the sessions of a confirmation round and, to a new
	// leader, a contact report of every open session (node/internal/lease):
	// about 12 bytes a session, so room for tens of thousands.
	maxHeartbeatContext = 1 << 20
	maxPropEntries      = 1 << 14 // entries in one forwarded proposal
	maxCommandSize      = maxLockCommand
)

// maxLockCommand bounds one encoded lock command, from lockfsm's limits: the
// largest is a multi-name acquire of MaxMultiNames names of maxNameLen bytes
// (each with its length), an owner and an election value at their limits,
// and at most 256 bytes of kind, flags and integer fields (about 15 varints
// of at most 10 bytes). About 18 KiB; TestLargestCommandFits builds it.
const maxLockCommand = lockfsm.MaxMultiNames*(lockfsm.MaxNameLen+2) + lockfsm.MaxOwnerLen + 2 +
	lockfsm.MaxValueLen + 2 + 256

// refusedRaft is the refuse.Log kind of refused raft messages.
const refusedRaft = "raft message"

var (
	// errGuard: a message no correct peer sends; refused and logged.
	errGuard = errors.New("refused")
	// errStale: a message a correct peer may send across a leader change
	// (a proposal reaching a node that just stopped leading, a hint of the
	// old term): dropped quietly, as raft itself would drop or ignore it.
	errStale = errors.New("stale")
)

// raftView is the part of raft's state a remote message is judged against.
type raftView struct {
	id, term, lead uint64
	isLeader       bool
	lastIndex      uint64 // exact as of the last Ready, a lower bound after it
	// leaders, if set, says who may become this node's leader
	// (privilege.LeaderRule); nil judges shapes only (the pure tests).
	leaders *privilege.LeaderRule
}

// checkRemote judges one message from a peer; nil means raft may step it.
func checkRemote(m *raftpb.Message, v raftView) error {
	from, t := m.GetFrom(), m.GetTerm()
	if err := checkEnums(m); err != nil {
		return err
	}
	switch {
	case from == v.id || transport.ReservedID(from):
		return fmt.Errorf("%w: sender id %016x", errGuard, from)
	case t >= maxRaftValue || m.GetIndex() >= maxRaftValue || m.GetLogTerm() >= maxRaftValue ||
		m.GetCommit() >= maxRaftValue || m.GetRejectHint() >= maxRaftValue:
		return fmt.Errorf("%w: index or term out of range", errGuard)
	case len(m.GetContext()) > maxContextSize && !(isHeartbeat(m) && len(m.GetContext()) <= maxHeartbeatContext):
		return fmt.Errorf("%w: context of %d bytes", errGuard, len(m.GetContext()))
	case m.GetSnapshot() != nil && m.GetType() != raftpb.MessageType_MsgSnap:
		return fmt.Errorf("%w: snapshot on a %v", errGuard, m.GetType())
	case (t == 0) != (m.GetType() == raftpb.MessageType_MsgProp || m.GetType() == raftpb.MessageType_MsgReadIndex):
		// raft sends every message with its term except proposals and read
		// requests, and steps a message of term 0 as a local one, skipping
		// every term check (a heartbeat of term 0 would commit anything).
		return fmt.Errorf("%w: %v of term %d", errGuard, m.GetType(), t)
	}
	// Only a voter may become the leader (node/internal/privilege).
	if v.leaders != nil && privilege.AdoptsLeader(m, v.term, v.lead) {
		if err := v.leaders.Check(from); err != nil {
			return fmt.Errorf("%w: %v (%v of term %d)", errGuard, err, m.GetType(), t)
		}
	}
	// Leader traffic of the current term comes from the leader raft follows.
	fromLeader := t != v.term || v.lead == 0 || from == v.lead
	switch m.GetType() {
	case raftpb.MessageType_MsgApp:
		if !fromLeader {
			return fmt.Errorf("%w: append from %016x, not the leader %016x of term %d", errGuard, from, v.lead, t)
		}
		return checkAppend(m)
	case raftpb.MessageType_MsgHeartbeat:
		if !fromLeader {
			return fmt.Errorf("%w: heartbeat from %016x, not the leader %016x of term %d", errGuard, from, v.lead, t)
		}
		if isCommitHint(m) {
			// A hint rides behind the leader's appends, which made this
			// node follow it in its term: one of a later term, or of this
			// term from another node, is forged (a huge term would disable
			// hints here until a restart); one of an earlier term, or
			// while this node follows no one, is stale.
			switch {
			case t > v.term || (t == v.term && v.lead != 0 && from != v.lead):
				return fmt.Errorf("%w: commit hint from %016x in term %d, not the leader %016x of term %d", errGuard, from, t, v.lead, v.term)
			case t < v.term || v.lead == 0:
				return fmt.Errorf("%w: commit hint of term %d (now %d, leader %016x)", errStale, t, v.term, v.lead)
			}
		}
		if t >= v.term && m.GetCommit() > v.lastIndex {
			return fmt.Errorf("%w: heartbeat commit %d beyond the log (last index %d)", errGuard, m.GetCommit(), v.lastIndex)
		}
	case raftpb.MessageType_MsgSnap:
		// A new leader whose log no longer reaches this node's may send a
		// snapshot first, in its new term (as raft allows for appends).
		if t < v.term {
			return fmt.Errorf("%w: snapshot of term %d (now %d)", errStale, t, v.term)
		}
		if !fromLeader {
			return fmt.Errorf("%w: snapshot from %016x, not the leader %016x of term %d", errGuard, from, v.lead, t)
		}
		return checkSnapshot(m, v.id)
	case raftpb.MessageType_MsgAppResp:
		if v.isLeader && t == v.term && (m.GetIndex() > v.lastIndex || m.GetRejectHint() > v.lastIndex) {
			return fmt.Errorf("%w: append response for index %d beyond the log (last index %d)", errGuard, m.GetIndex(), v.lastIndex)
		}
	case raftpb.MessageType_MsgVote, raftpb.MessageType_MsgPreVote, raftpb.MessageType_MsgVoteResp,
		raftpb.MessageType_MsgPreVoteResp, raftpb.MessageType_MsgHeartbeatResp:
	case raftpb.MessageType_MsgTimeoutNow:
		if t < v.term {
			return fmt.Errorf("%w: campaign order of term %d (now %d)", errStale, t, v.term)
		}
		if t != v.term || from != v.lead {
			return fmt.Errorf("%w: campaign order from %016x, not the leader %016x of term %d", errGuard, from, v.lead, v.term)
		}
	case raftpb.MessageType_MsgReadIndex:
		// A node issues ReadIndex only as leader; one that lost leadership
		// in the same turn has raft forward it here.
		if len(m.GetEntries()) != 1 || len(m.GetEntries()[0].GetData()) > maxContextSize {
			return fmt.Errorf("%w: read index request of %d entries", errGuard, len(m.GetEntries()))
		}
		if !v.isLeader {
			return fmt.Errorf("%w: read index request to a non-leader", errStale)
		}
	case raftpb.MessageType_MsgReadIndexResp:
		if t < v.term {
			return fmt.Errorf("%w: read index answer of term %d (now %d)", errStale, t, v.term)
		}
		if t != v.term || from != v.lead || len(m.GetEntries()) != 1 {
			return fmt.Errorf("%w: read index answer from %016x, not the leader %016x of term %d", errGuard, from, v.lead, v.term)
		}
	case raftpb.MessageType_MsgTransferLeader:
		// Forwarded by a node that called TransferLeader as it lost
		// leadership: it asks to lead itself.
		if !v.isLeader {
			return fmt.Errorf("%w: leadership transfer request to a non-leader", errStale)
		}
	case raftpb.MessageType_MsgProp:
		if err := checkProposal(m); err != nil {
			return err
		}
		if !v.isLeader {
			// The sender thought this node led (it just stopped, or the
			// sender's view is old): raft would forward it as if this
			// node proposed it. The proposer retries.
			return fmt.Errorf("%w: proposal to a non-leader", errStale)
		}
	default:
		return fmt.Errorf("%w: a peer never sends %v", errGuard, m.GetType())
	}
	return nil
}

// checkEnums: raft indexes arrays with the message type (IsLocalMsg) and
// switches on entry types; values it does not define (proto keeps even
// negative ones) never reach it. The transport refuses them when decoding;
// checked again here for every path into the loop.
func checkEnums(m *raftpb.Message) error {
	if _, ok := raftpb.MessageType_name[int32(m.GetType())]; !ok {
		return fmt.Errorf("%w: message type %d", errGuard, m.GetType())
	}
	for _, e := range m.GetEntries() {
		switch e.GetType() {
		case raftpb.EntryNormal, raftpb.EntryConfChange, raftpb.EntryConfChangeV2:
		default:
			return fmt.Errorf("%w: entry type %d", errGuard, e.GetType())
		}
	}
	return nil
}

// checkAppend: the entries follow m.Index one by one, with terms that never
// decrease, not below m.LogTerm and not above m.Term (what a leader of m.Term
// can have). raft's maybeAppend indexes its slice by these assumptions.
func checkAppend(m *raftpb.Message) error {
	next, prevTerm := m.GetIndex()+1, m.GetLogTerm()
	if prevTerm > m.GetTerm() {
		return fmt.Errorf("%w: append log term %d above its term %d", errGuard, prevTerm, m.GetTerm())
	}
	if uint64(len(m.GetEntries())) >= maxRaftValue-m.GetIndex() {
		return fmt.Errorf("%w: append beyond the index range", errGuard)
	}
	for _, e := range m.GetEntries() {
		if e.GetIndex() != next || e.GetTerm() < prevTerm || e.GetTerm() > m.GetTerm() || e.GetTerm() == 0 {
			return fmt.Errorf("%w: append entry (index %d, term %d) does not follow (index %d, term >= %d, <= %d)",
				errGuard, e.GetIndex(), e.GetTerm(), next, prevTerm, m.GetTerm())
		}
		next, prevTerm = next+1, e.GetTerm()
	}
	return nil
}

// checkProposal: a forwarded proposal carries lock commands only, each a
// normal entry with data; raft counts empty entries as free against its
// uncommitted-size limit, and decodes configuration changes itself (and
// panics on bad ones). Whose commands they are is checked by authorise.
func checkProposal(m *raftpb.Message) error {
	ents := m.GetEntries()
	if len(ents) == 0 || len(ents) > maxPropEntries {
		return fmt.Errorf("%w: proposal of %d entries", errGuard, len(ents))
	}
	for _, e := range ents {
		if e.GetType() != raftpb.EntryNormal {
			return fmt.Errorf("%w: proposed %v (configuration changes are the leader's own)", errGuard, e.GetType())
		}
		if n := len(e.GetData()); n == 0 || n > maxCommandSize {
			return fmt.Errorf("%w: proposed entry of %d bytes", errGuard, n)
		}
	}
	return nil
}

// checkSnapshot: a snapshot raft can restore without panicking: non-zero
// index and term not above the message's, and a ConfState that raft's own
// confchange.Restore accepts and that contains this node.
func checkSnapshot(m *raftpb.Message, self uint64) error {
	md := m.GetSnapshot().GetMetadata()
	if md.GetIndex() == 0 || md.GetIndex() >= maxRaftValue || md.GetTerm() == 0 || md.GetTerm() > m.GetTerm() {
		return fmt.Errorf("%w: snapshot (index %d, term %d) in a message of term %d", errGuard, md.GetIndex(), md.GetTerm(), m.GetTerm())
	}
	cs := md.GetConfState()
	if err := checkConfState(cs, md.GetIndex()); err != nil {
		return err
	}
	for _, set := range [][]uint64{cs.GetVoters(), cs.GetLearners(), cs.GetVotersOutgoing()} {
		for _, id := range set {
			if id == self {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: snapshot configuration without this node", errGuard)
}

// checkConfState runs raft's own restore of cs on a scratch tracker, so a
// ConfState raft would panic on is refused first.
func checkConfState(cs *raftpb.ConfState, last uint64) error {
	if cs == nil || len(cs.GetVoters()) == 0 {
		return fmt.Errorf("%w: configuration without voters", errGuard)
	}
	n := len(cs.GetVoters()) + len(cs.GetLearners()) + len(cs.GetVotersOutgoing()) + len(cs.GetLearnersNext())
	if n > 1<<12 {
		return fmt.Errorf("%w: configuration of %d ids", errGuard, n)
	}
	for _, set := range [][]uint64{cs.GetVoters(), cs.GetLearners(), cs.GetVotersOutgoing(), cs.GetLearnersNext()} {
		for _, id := range set {
			if transport.ReservedID(id) {
				return fmt.Errorf("%w: configuration with reserved id %016x", errGuard, id)
			}
		}
	}
	cfg, trk, err := confchange.Restore(confchange.Changer{
		Tracker:   tracker.MakeProgressTracker(1, 0),
		LastIndex: last,
	}, cs)
	if err != nil {
		return fmt.Errorf("%w: configuration raft cannot restore: %v", errGuard, err)
	}
	// raft also panics if the restored configuration is not the one given
	// (an id both voter and learner restores as a learner).
	pt := tracker.MakeProgressTracker(1, 0)
	pt.Config, pt.Progress = cfg, trk
	if err := cs.Equivalent(pt.ConfState()); err != nil {
		return fmt.Errorf("%w: configuration raft would restore differently: %v", errGuard, err)
	}
	return nil
}

// checkConfChange runs cc on a scratch copy of configuration cs, as raft's
// applyConfChange would, and reports what would make raft panic (removing
// every voter, entering a joint configuration twice, ...). Used on apply:
// a committed change raft cannot apply stops the node cleanly.
func checkConfChange(cs *raftpb.ConfState, cc raftpb.ConfChangeI, last uint64) error {
	_, err := privilege.NextConf(cs, cc, last)
	return err
}

// msgGuard is the loop's state for judging remote messages.
type msgGuard struct {
	lastIndex  uint64                // raft's last index as of the last Ready
	appStepped bool                  // a MsgApp or MsgSnap was stepped since the last Ready
	deferred   []*raftpb.Message     // heartbeats waiting for the end of the turn
	leaders    *privilege.LeaderRule // who may lead this node
	confs      privilege.ConfLedger  // configuration changes appended, not yet applied
}

// noteAppend updates the guard from one Ready's storage append (the loop
// calls it for each MsgStorageAppend): its entries are raft's unstable tail,
// so their last index is raft's last index.
func (g *msgGuard) noteAppend(m *raftpb.Message) {
	if ents := m.GetEntries(); len(ents) > 0 {
		g.lastIndex = ents[len(ents)-1].GetIndex()
		g.confs.NoteEntries(ents)
	} else if s := m.GetSnapshot(); s != nil && !raft.IsEmptySnap(s) {
		g.lastIndex = s.GetMetadata().GetIndex()
		g.confs.NoteSnapshot(s.GetMetadata())
	}
}

// view is raft's state for checkRemote: rn's, with the last index as of
// the last Ready; self is this node's id.
func (g *msgGuard) view(rn *raft.RawNode, self uint64) raftView {
	st := rn.BasicStatus()
	return raftView{id: self, term: st.GetTerm(), lead: st.Lead, isLeader: st.RaftState == raft.StateLeader,
		lastIndex: g.lastIndex, leaders: g.leaders}
}

// isHeartbeat: a heartbeat or its answer, whose context may carry contact
// information (node/internal/lease).
func isHeartbeat(m *raftpb.Message) bool {
	t := m.GetType()
	return t == raftpb.MessageType_MsgHeartbeat || t == raftpb.MessageType_MsgHeartbeatResp
}
