package node

import (
	"context"
	"fmt"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/internal/knobs"
	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/node/internal/privilege"
	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// transportHandler is the Node as the transport sees it. Its methods never
// block for long: they hand work to the loop. Every from is the caller's
// authenticated member id (transport.authenticate).
type transportHandler Node

// Receive queues raft messages for the loop, dropping those of senders that
// are not members (fleet.MemberSet). If the loop is far behind the batch is
// dropped; raft retransmits. The loop judges each message before raft sees
// it (guard.go).
func (h *transportHandler) Receive(msgs []*raftpb.Message) {
	n := (*Node)(h)
	from := msgs[0].GetFrom()
	if !n.members.Allows(from) {
		// One batch is one peer's (transport: From == the stream's peer).
		// At Info: a member removed a moment ago, or one gossip has not
		// reported yet, does this too.
		n.tr.Note(refusedRaft, views.MemberID(from).String(), "reason", "not a member", "type", msgs[0].GetType().String(),
			"msgs", len(msgs))
		return
	}
	if n.k.Stages != nil {
		for _, m := range msgs {
			if m.GetType() == raftpb.MessageType_MsgApp {
				n.k.StampEntries(n.id, knobs.StageReceived, m)
			}
		}
	}
	select {
	case n.recvc <- msgs:
	case <-n.stopc:
	default:
		n.log.Debug("receive queue full; dropping batch", "msgs", len(msgs))
	}
}

// AcceptSnapshot admits a snapshot transfer before its file is received:
// only from the leader this node follows, and only a snapshot raft can
// restore (checkSnapshot). The loop checks again when it steps it.
func (h *transportHandler) AcceptSnapshot(from uint64, m *raftpb.Message) error {
	n := (*Node)(h)
	if !n.members.Allows(from) {
		return fmt.Errorf("%w: %016x is not a member", transport.ErrPermissionDenied, from)
	}
	if lead := n.lead.Load(); from != lead {
		if m.GetTerm() > n.termSeen.Load() {
			// Maybe a leader this node has not heard of yet: its
			// heartbeats will say so, and it sends the snapshot again.
			return fmt.Errorf("snapshot from %016x of term %d: not following it yet", from, m.GetTerm())
		}
		return fmt.Errorf("%w: snapshot from %016x, the leader is %016x", transport.ErrPermissionDenied, from, lead)
	}
	return checkSnapshot(m, n.id)
}

// ReceiveSnapshot hands a received snapshot and its file to the loop, which
// steps it and keeps the file only if raft accepts it (snapshotin.go). It
// waits for the loop to take it (bounded by ctx): a snapshot the node could
// not take is reported to the sender as failed, never acknowledged.
func (h *transportHandler) ReceiveSnapshot(ctx context.Context, m *raftpb.Message, file string) error {
	n := (*Node)(h)
	select {
	case n.reqc <- request{f: func() { n.stepSnapshot(m, file) }}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-n.stopc:
		return lockerr.ErrClosed
	}
}

func (h *transportHandler) ReportUnreachable(id uint64) {
	n := (*Node)(h)
	n.tryDo(func() { n.rn.ReportUnreachable(id) })
}

func (h *transportHandler) ReportSnapshot(id uint64, failed bool) {
	n := (*Node)(h)
	st := raft.SnapshotFinish
	if failed {
		st = raft.SnapshotFailure
	}
	// Never dropped: an unreported snapshot leaves the follower paused.
	select {
	case n.reqc <- request{f: func() { n.rn.ReportSnapshot(id, st) }}:
	case <-n.stopc:
	}
}

// Keepalive serves a member's keepalive for one of its own sessions (leader).
func (h *transportHandler) Keepalive(ctx context.Context, from uint64, req *transportpb.KeepaliveRequest) (*transportpb.KeepaliveResponse, error) {
	n := (*Node)(h)
	st := n.awaitConfirmed(ctx, keepaliveWaiter{session: req.GetSession(), from: from})
	if st == keepaliveDenied {
		return nil, n.refuseCall(from, "Keepalive", fmt.Errorf("%w: session %d", errNotYours, req.GetSession()))
	}
	return &transportpb.KeepaliveResponse{Status: transportpb.KeepaliveStatus(st)}, nil
}

// Renew serves a member's lease renewal of one of its own holds (leader).
func (h *transportHandler) Renew(ctx context.Context, from uint64, req *transportpb.RenewRequest) (*transportpb.RenewResponse, error) {
	n := (*Node)(h)
	st := n.awaitConfirmed(ctx, keepaliveWaiter{name: req.GetName(), token: req.GetToken(), session: req.GetSession(),
		owner: string(req.GetOwner()), renew: true, from: from})
	if st == keepaliveDenied {
		return nil, n.refuseCall(from, "Renew", fmt.Errorf("%w: lock %q", errNotYours, req.GetName()))
	}
	return &transportpb.RenewResponse{Status: transportpb.KeepaliveStatus(st)}, nil
}

// Removed serves the leader's notice that this node is no longer in the
// configuration: only a caller with a voter certificate may send one (a
// leader is a voter: privilege.LeaderRule), and fleet.JudgeRemoved decides whether
// to believe it (from the leader this node follows, or a voter of its
// configuration); a believed one stops this node with lockerr.ErrRemoved.
func (h *transportHandler) Removed(ctx context.Context, from uint64, req *transportpb.RemovedRequest) (*transportpb.RemovedResponse, error) {
	n := (*Node)(h)
	if err := privilege.RequireRole(ctx, transport.Role.Voter, "voter"); err != nil {
		return nil, n.refuseCall(from, "Removed", err)
	}
	res := make(chan error, 1)
	verdict, err := awaitLoop(ctx, n, res, func() {
		err := n.fleet.JudgeRemoved(from, req)
		if err == nil {
			n.loop.stopWith = lockerr.ErrRemoved
		}
		res <- err
	})
	if err != nil {
		return nil, err
	}
	if verdict != nil {
		return nil, n.refuseCall(from, "Removed", verdict)
	}
	return &transportpb.RemovedResponse{Stopped: true}, nil
}

// Leave serves a member's request to be removed from the configuration for
// good (its Leave), in gossip or static mode: the leader proposes the
// removal of the caller (never of anyone else) and answers once it is
// applied here.
func (h *transportHandler) Leave(ctx context.Context, from uint64, _ *transportpb.LeaveRequest) (*transportpb.LeaveResponse, error) {
	n := (*Node)(h)
	res := make(chan error, 1)
	removed, err := awaitLoop(ctx, n, res, func() { n.fleet.ProposeRemoval(from, res) })
	if err == nil {
		err = removed
	}
	if err != nil {
		return nil, err
	}
	return &transportpb.LeaveResponse{}, nil
}

// Form serves a formation candidate's request to adopt its formation id
// (fleet.ServeForm).
func (h *transportHandler) Form(ctx context.Context, from uint64, in *transportpb.FormRequest) (*transportpb.FormResponse, error) {
	n := (*Node)(h)
	out, err := n.fleet.ServeForm(from, in)
	if err != nil {
		return nil, n.refuseCall(from, "Form", err)
	}
	return out, nil
}

// VersionGate answers a follower's question whether the lock catalogue is
// open (fleet.AnswerGate). Read-only: any member may ask.
func (h *transportHandler) VersionGate(ctx context.Context, from uint64, _ *transportpb.VersionGateRequest) (*transportpb.VersionGateResponse, error) {
	n := (*Node)(h)
	return n.fleet.AnswerGate(ctx)
}

// tryDo runs f in the loop without blocking the caller when the loop is busy
// or gone; for reports raft can live without.
func (n *Node) tryDo(f func()) {
	select {
	case n.reqc <- request{f: f}:
	default:
	}
}
