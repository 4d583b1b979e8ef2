package node

// The one node-to-node call of inspection: a light member (no lock table)
// and a follower that wants the leader's membership view ask the leader; a
// node asked to transfer leadership or remove a member without being the
// leader asks it too.
// It is the typed Inspect method of the transport: the request is typed,
// the reply is the view as JSON (read-only output for operators, never input
// to raft or the lock table). Reads are answered to a member of the cluster
// (of the configuration, the static list or gossip) or an operator; a
// transfer or a removal only to an operator (privilege.InspectAllowed). This file is
// the only place that makes or serves the call: askLeader (client side) and
// the Inspect handler (server side).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/node/internal/privilege"
	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// inspectRequest is what a member asks the leader.
type inspectRequest struct {
	Op     string `json:"op"` // "lock", "locks", "members", "transfer" or "remove"
	Name   string `json:"name,omitempty"`
	Prefix string `json:"prefix,omitempty"`
	After  string `json:"after,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	Stale  bool   `json:"stale,omitempty"`
	To     uint64 `json:"to,omitempty"`     // "transfer": the transferee (0: the leader picks)
	Member uint64 `json:"member,omitempty"` // "remove": the member to remove
}

type inspectLockReply struct {
	View  views.LockView `json:"view"`
	Found bool           `json:"found"`
}

// askLeader sends req to the leader this node knows (on a light member,
// else any member with data) and decodes the answer into out. lockerr.ErrUnavailable
// when there is no one to ask or the call fails.
func (n *Node) askLeader(ctx context.Context, req inspectRequest, out any) error {
	target := n.fwd.Target()
	if target == 0 || target == n.id {
		return fmt.Errorf("%w: no leader known", lockerr.ErrUnavailable)
	}
	op, ok := inspectOps[req.Op]
	if !ok {
		return fmt.Errorf("lockraft: unknown inspect op %q", req.Op)
	}
	resp, err := n.tr.Inspect(ctx, target, &transportpb.InspectRequest{Op: op, Name: req.Name, Prefix: req.Prefix,
		After: req.After, Limit: uint32(max(req.Limit, 0)), Stale: req.Stale, To: req.To, Member: req.Member})
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if errors.Is(err, transport.ErrPermissionDenied) {
			// Kept in the chain: an operator action says whom to ask
			// instead (askLeaderToAct).
			return fmt.Errorf("%w: inspect via %016x: %w", lockerr.ErrUnavailable, target, err)
		}
		return fmt.Errorf("%w: inspect via %016x: %v", lockerr.ErrUnavailable, target, err)
	}
	if err := json.Unmarshal(resp.GetJson(), out); err != nil {
		return fmt.Errorf("%w: inspect via %016x: bad reply: %v", lockerr.ErrUnavailable, target, err)
	}
	return nil
}

var inspectOps = map[string]transportpb.InspectOp{
	"lock":     transportpb.InspectOp_INSPECT_OP_LOCK,
	"locks":    transportpb.InspectOp_INSPECT_OP_LOCKS,
	"members":  transportpb.InspectOp_INSPECT_OP_MEMBERS,
	"transfer": transportpb.InspectOp_INSPECT_OP_TRANSFER,
	"remove":   transportpb.InspectOp_INSPECT_OP_REMOVE,
}

// Inspect serves an inspection call from another member. Only a leader
// answers (a follower's own view would not be what the caller asked for); it
// reads as a local caller would.
func (h *transportHandler) Inspect(ctx context.Context, from uint64, in *transportpb.InspectRequest) (*transportpb.InspectResponse, error) {
	n := (*Node)(h)
	r := inspectRequest{Name: in.GetName(), Prefix: in.GetPrefix(), After: in.GetAfter(),
		Limit: int(min(in.GetLimit(), 1<<20)), Stale: in.GetStale(), To: in.GetTo(), Member: in.GetMember()}
	for name, op := range inspectOps {
		if op == in.GetOp() {
			r.Op = name
		}
	}
	if err := privilege.InspectAllowed(ctx, r.Op, n.fleet.IsMember); err != nil {
		return nil, n.refuseCall(from, "Inspect", err)
	}
	if n.light() || n.Leader() != n.id {
		return nil, fmt.Errorf("%w: not the leader", lockerr.ErrUnavailable)
	}
	opts := ReadOptions{Stale: r.Stale}
	var out any
	var err error
	switch r.Op {
	case "lock":
		var v inspectLockReply
		v.View, v.Found, err = n.InspectLock(ctx, r.Name, opts)
		out = v
	case "locks":
		out, err = n.InspectLocks(ctx, r.Prefix, r.After, r.Limit, opts)
	case "transfer":
		// Leadership moves away from the node serving this call, so the
		// answer is in the reply, not in a gRPC error.
		l, terr := n.TransferLeader(ctx, r.To)
		out = newActionReply(l, terr)
	case "remove":
		// The answer is in the reply, as a transfer's: the error's
		// sentinel (not the leader, not a member, refused) is the caller's.
		out = newActionReply(0, n.removeHere(ctx, r.Member))
	case "members":
		out, err = n.InspectMembers(ctx, ReadOptions{Stale: true}) // the leader's own view
	default:
		err = fmt.Errorf("lockraft: unknown inspect op %q", r.Op)
	}
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return &transportpb.InspectResponse{Json: b}, nil
}
