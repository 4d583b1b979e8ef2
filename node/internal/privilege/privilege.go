// Package privilege holds the node's rules of least privilege among
// members, as pure functions of what they are given: who may become a
// node's leader (LeaderRule), which configuration changes an append may
// carry (ConfLedger), which calls need which certificate role (RequireRole,
// InspectAllowed), and the quotas the leader enforces (Quotas). The node
// (package node: guard.go, remote.go, inspectcall.go, authz.go, fwd.go)
// applies them.
package privilege

import (
	"context"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3/confchange"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/transport"
)

// Least privilege among raft members
//
// raft believes any message of a higher term: a MsgApp, heartbeat or
// snapshot of term T+1 makes a follower take its sender as leader at once,
// without asking whether an election happened, and then apply what it
// appends. So the guard (guard.go) narrows who may be taken as leader, and
// what a leader's append may carry:
//
//   - LeaderRule: a message that would make this node adopt a leader (leader
//     traffic of a higher term, or of the current term while it follows no
//     one) and a vote request come only from a voter of the configuration
//     this node applied (incoming or outgoing) whose certificate has the
//     voter role. A member that is not a voter — a light member, a learner, a
//     certificate of no member — cannot make itself leader, so it cannot
//     append commands (an expiry of another member's session), configuration
//     changes, or make a node believe a Removed notice from it. A node with no
//     configuration yet (a new learner before its first append) cannot judge
//     the configuration and takes a voter-role sender.
//   - ConfLedger: the configuration changes an append carries are what this
//     node's membership logic and raft produce — a ConfChange only as raft's
//     bootstrap writes it (adding a voter), a ConfChangeV2 adding a voter or
//     learner, promoting, removing or entering/leaving a joint configuration
//     of real ids — and raft's own rules accept each on top of the
//     configuration it follows in this node's log (never one that removes
//     every voter or enters a joint configuration twice). An append is cut
//     before the first change that fails; the part before it is stepped.
//
// Within those rules raft trusts its voters, as etcd does: a voter of the
// configuration that campaigns and wins may lead, and a leader may propose
// any lock command (an expiry included).

// LeaderRule says whether a sender may become the leader this node follows.
// conf is the configuration the loop applied; role the transport's record of
// a member's certificate role (Network.PeerRole).
type LeaderRule struct {
	Conf func() *raftpb.ConfState
	Role func(id uint64) (transport.Role, bool)
}

// check: nil if from may lead this node; an errGuard error otherwise.
func (r *LeaderRule) Check(from uint64) error {
	if role, ok := r.Role(from); !ok || !role.Voter() {
		return fmt.Errorf("%016x has no voter certificate (role %v, known %t)", from, role, ok)
	}
	cs := r.Conf()
	if len(cs.GetVoters()) == 0 && len(cs.GetVotersOutgoing()) == 0 {
		return nil // no configuration yet: nothing to judge by
	}
	if slices.Contains(cs.GetVoters(), from) || slices.Contains(cs.GetVotersOutgoing(), from) {
		return nil
	}
	return fmt.Errorf("%016x is not a voter of the applied configuration", from)
}

// adoptsLeader reports whether raft, stepping m, would take its sender as
// leader (or a candidate's request may move this node's term): leader traffic
// of a term above v.term, or of v.term while this node follows no one, and
// vote requests.
func AdoptsLeader(m *raftpb.Message, term, lead uint64) bool {
	switch m.GetType() {
	case raftpb.MessageType_MsgApp, raftpb.MessageType_MsgHeartbeat, raftpb.MessageType_MsgSnap:
		return m.GetTerm() > term || (m.GetTerm() == term && lead == 0)
	case raftpb.MessageType_MsgVote, raftpb.MessageType_MsgPreVote:
		return true
	}
	return false
}

// maxConfContext bounds a configuration change's context: the gRPC
// address of the member added.
const maxConfContext = 512

// ConfLedger follows the configuration changes in this node's raft log
// that it has not applied yet, so an append's changes are judged on top of
// the configuration they follow (loop; fed by msgGuard.noteAppend).
type ConfLedger struct {
	pending []pendingConf // appended, by index, possibly applied already
	// A snapshot appended but perhaps not restored yet: its configuration
	// is the base from its index on.
	snapIndex uint64
	snapConf  *raftpb.ConfState
}

type pendingConf struct {
	index uint64
	cc    raftpb.ConfChangeI
}

// noteEntries records the configuration changes among entries raft appended
// (replacing those at or after their first index).
func (l *ConfLedger) NoteEntries(ents []*raftpb.Entry) {
	if len(ents) == 0 {
		return
	}
	first := ents[0].GetIndex()
	l.pending = slices.DeleteFunc(l.pending, func(p pendingConf) bool { return p.index >= first })
	for _, e := range ents {
		if e.GetType() == raftpb.EntryNormal {
			continue
		}
		if cc, err := decodeConfEntry(e); err == nil {
			l.pending = append(l.pending, pendingConf{index: e.GetIndex(), cc: cc})
		}
	}
}

// noteSnapshot records an appended snapshot: everything before it is gone.
func (l *ConfLedger) NoteSnapshot(md *raftpb.SnapshotMetadata) {
	l.pending = l.pending[:0]
	l.snapIndex, l.snapConf = md.GetIndex(), md.GetConfState()
}

// trimAppend judges the configuration changes of append m on top of the
// configuration this node's log has at m.Index (applied, applied at
// lastApplied, plus the changes appended since), and cuts m's entries
// before the first one a leader could not have proposed. It returns why it
// cut, or nil. It judges nothing when raft will reject m anyway (m.Index
// beyond lastIndex) or when this node has no configuration yet.
func (l *ConfLedger) TrimAppend(m *raftpb.Message, applied *raftpb.ConfState, lastApplied, lastIndex uint64) error {
	ents := m.GetEntries()
	if !slices.ContainsFunc(ents, func(e *raftpb.Entry) bool { return e.GetType() != raftpb.EntryNormal }) {
		return nil
	}
	if m.GetIndex() > lastIndex {
		return nil
	}
	base, baseIdx := applied, lastApplied
	if l.snapIndex > baseIdx && l.snapConf != nil {
		base, baseIdx = l.snapConf, l.snapIndex
	}
	if len(base.GetVoters()) == 0 {
		return nil
	}
	cs := base
	for _, p := range l.pending {
		if p.index <= baseIdx || p.index > m.GetIndex() {
			continue
		}
		next, err := NextConf(cs, p.cc, p.index)
		if err != nil {
			return nil // this node's own log says otherwise: not ours to judge
		}
		cs = next
	}
	for i, e := range ents {
		if e.GetType() == raftpb.EntryNormal || e.GetIndex() <= baseIdx {
			continue
		}
		cc, err := decodeConfEntry(e)
		if err == nil {
			err = leaderMayPropose(cc)
		}
		if err == nil {
			cs, err = NextConf(cs, cc, e.GetIndex())
		}
		if err != nil {
			clear(ents[i:])
			m.Entries = ents[:i]
			return fmt.Errorf("append cut at index %d: configuration change %v", e.GetIndex(), err)
		}
	}
	return nil
}

// decodeConfEntry decodes a configuration change entry.
func decodeConfEntry(e *raftpb.Entry) (raftpb.ConfChangeI, error) {
	switch e.GetType() {
	case raftpb.EntryConfChange:
		cc := &raftpb.ConfChange{}
		if err := proto.Unmarshal(e.GetData(), cc); err != nil {
			return nil, err
		}
		return cc, nil
	case raftpb.EntryConfChangeV2:
		cc := &raftpb.ConfChangeV2{}
		if err := proto.Unmarshal(e.GetData(), cc); err != nil {
			return nil, err
		}
		return cc, nil
	}
	return nil, fmt.Errorf("entry type %v", e.GetType())
}

// leaderMayPropose: the shapes of change a leader of this cluster proposes.
// A ConfChange (v1) only as raft's Bootstrap writes it (adding a voter); a
// ConfChangeV2 whose changes add a voter or learner or remove a member, each
// of a real id (raft's automatic leaving of a joint configuration has none).
func leaderMayPropose(cc raftpb.ConfChangeI) error {
	if v1, ok := cc.(*raftpb.ConfChange); ok && v1.GetType() != raftpb.ConfChangeAddNode {
		return fmt.Errorf("v1 change %v (only the bootstrap's AddNode)", v1.GetType())
	}
	v2 := cc.AsV2()
	if len(v2.GetContext()) > maxConfContext {
		return fmt.Errorf("context of %d bytes", len(v2.GetContext()))
	}
	if _, ok := raftpb.ConfChangeTransition_name[int32(v2.GetTransition())]; !ok {
		return fmt.Errorf("transition %d", v2.GetTransition())
	}
	for _, ch := range v2.GetChanges() {
		switch ch.GetType() {
		case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode, raftpb.ConfChangeRemoveNode:
		default:
			return fmt.Errorf("change type %v", ch.GetType())
		}
		if transport.ReservedID(ch.GetNodeId()) {
			return fmt.Errorf("change of reserved id %016x", ch.GetNodeId())
		}
	}
	return nil
}

// nextConf is the configuration raft's applyConfChange makes of cs with cc
// (at log index last), or raft's reason to refuse it (removing every voter,
// entering a joint configuration twice, leaving one that is not joint):
// raft's own confchange on a scratch tracker.
func NextConf(cs *raftpb.ConfState, cc raftpb.ConfChangeI, last uint64) (*raftpb.ConfState, error) {
	cfg, trk, err := confchange.Restore(confchange.Changer{Tracker: tracker.MakeProgressTracker(1, 0), LastIndex: last}, cs)
	if err != nil {
		return nil, err
	}
	pt := tracker.MakeProgressTracker(1, 0)
	pt.Config, pt.Progress = cfg, trk
	ch := confchange.Changer{Tracker: pt, LastIndex: last}
	v2 := cc.AsV2()
	switch {
	case v2.LeaveJoint():
		cfg, trk, err = ch.LeaveJoint()
	default:
		if autoLeave, ok := v2.EnterJoint(); ok {
			cfg, trk, err = ch.EnterJoint(autoLeave, v2.GetChanges()...)
		} else {
			cfg, trk, err = ch.Simple(v2.GetChanges()...)
		}
	}
	if err != nil {
		return nil, err
	}
	pt.Config, pt.Progress = cfg, trk
	return pt.ConfState(), nil
}

// requireRole: nil if the caller of the incoming call whose ctx this is has
// a role that has (Role.Voter, Role.Operator, Role.Member), else
// transport.ErrPermissionDenied naming what was wanted. Every Network
// passes its calls a ctx with their caller; one without is refused.
func RequireRole(ctx context.Context, has func(transport.Role) bool, want string) error {
	p, ok := transport.CallerOf(ctx)
	if ok && has(p.Role) {
		return nil
	}
	return fmt.Errorf("%w: a %s call from %016x with role %v", transport.ErrPermissionDenied, want, p.ID, p.Role)
}

// inspectAllowed says whether the caller of an Inspect call (ctx) may have
// op served: "transfer" and "remove", operator actions, need the operator role; the
// views ("lock", "locks", "members") a member of the cluster (member says
// whether an id is one) or the operator role. A certificate of the CA that
// names no member learns nothing and moves nothing.
func InspectAllowed(ctx context.Context, op string, member func(uint64) bool) error {
	if op == "transfer" || op == "remove" {
		return RequireRole(ctx, transport.Role.Operator, "operator")
	}
	p, ok := transport.CallerOf(ctx)
	if ok && (p.Role.Operator() || p.Role.Member() && member(p.ID)) {
		return nil
	}
	return fmt.Errorf("%w: %s view asked by %016x, no member of the cluster (role %v)", transport.ErrPermissionDenied, op, p.ID, p.Role)
}

// Quotas
//
// What a member asks the leader to do costs every replica memory and disk
// for as long as it lasts, so the leader bounds it per member, when it
// proposes a member's command (the node's authorise and FwdOpen), against its applied lock
// table:
//
//   - a member has at most Config.MaxSessionsPerMember sessions open;
//   - one of its sessions holds or waits for at most
//     Config.MaxLocksPerSession names (a reentrant acquire of a name it
//     already holds or waits for is not a new one);
//   - in a static cluster only a member of the list opens a session: a
//     certificate of the CA naming another id is no member there (with
//     gossip, any member of the fleet may, as a light member).
//
// Commands proposed but not applied yet are not counted, so a burst can pass
// a quota by what is in flight (at most the calls a peer may have open at
// once). A refusal wraps transport.ErrPermissionDenied (what a remote caller
// can tell) and, for a quota, lockerr.ErrQuotaExceeded; the leader's own
// commands are never refused.
type Quotas struct {
	Sessions, Locks int
	Static          bool              // a static cluster: sessions only for members
	Member          func(uint64) bool // who is a member of the static list (MemberSet.Allows)
}

// admit: nil if member from may have cmd proposed for it, given table.
func (q Quotas) Admit(from uint64, cmd *lockfsm.Command, table *lockfsm.FSM) error {
	switch cmd.Kind {
	case lockfsm.KindOpenSession:
		return q.AdmitOpen(from, table)
	case lockfsm.KindAcquire:
		s, ok := table.Session(cmd.Session)
		if !ok || s.Holds+s.Waits < q.Locks {
			return nil
		}
		if li, ok := table.Lock(cmd.Name); ok {
			for _, h := range li.Holds {
				if h.Session == cmd.Session {
					return nil // reentrant, or another hold of a name it has
				}
			}
			for _, w := range li.Waiters {
				if w.Session == cmd.Session {
					return nil
				}
			}
		}
		return fmt.Errorf("%w: %w: session %d of member %016x has %d locks (at most %d)", transport.ErrPermissionDenied, lockerr.ErrQuotaExceeded,
			cmd.Session, from, s.Holds+s.Waits, q.Locks)
	}
	return nil
}

// admitOpen: nil if member from may open another session.
func (q Quotas) AdmitOpen(from uint64, table *lockfsm.FSM) error {
	if q.Static && !q.Member(from) {
		return fmt.Errorf("%w: %016x is not a member of this static cluster", transport.ErrPermissionDenied, from)
	}
	if n := table.SessionsOf(from); n >= q.Sessions {
		return fmt.Errorf("%w: %w: member %016x has %d sessions open (at most %d)", transport.ErrPermissionDenied,
			lockerr.ErrQuotaExceeded, from, n, q.Sessions)
	}
	return nil
}
