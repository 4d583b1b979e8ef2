package transport

import (
	"context"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/transport/transportpb"
)

// Network is what a node needs of its transport: raft message streams and
// snapshot transfers (Send), the typed calls to its peers (Caller), where its
// peers listen, who they are (roles, revocation), and what it refused. *Transport implements it over gRPC. The
// node's tests plug in others beneath the same Handler: an in-memory network
// and a wrapper that injects faults. Implementations are safe for concurrent
// use, and none of their methods blocks on a slow peer except the calls,
// which honour their ctx.
type Network interface {
	Caller
	// Addr is the address this node's peers reach it at.
	Addr() string
	// AddPeer makes peer id reachable at addr (idempotent; a new addr
	// replaces the old one).
	AddPeer(id uint64, addr string)
	// Greet opens the raft message stream to peer id now, before there is
	// anything to send, so that the peer hears from this node: a member that
	// starts greets the raft members it knows, and a leader backing off from
	// redialling it (it was down, or never up) redials at once. Unknown ids
	// are ignored; it returns at once.
	Greet(id uint64)
	// Send queues raft messages for their destinations and returns at once.
	// A message that cannot be queued is dropped and its destination
	// reported to the Handler (ReportUnreachable; for MsgSnap,
	// ReportSnapshot). Send owns the messages after the call, not
	// the slice: the caller reuses msgs once Send returns.
	Send(msgs []*raftpb.Message)
	// Formation is this node's formation id ("" if none yet); SetFormation
	// sets it once the node has adopted one.
	Formation() string
	SetFormation(id string) error
	// PeerVersion is the software version peer last announced.
	PeerVersion(peer uint64) (version string, seen bool)
	// PeerRole is the role of the last verified certificate naming member
	// id (either direction), and whether there was one; PlaintextRole
	// without TLS. A call's own caller and role: CallerOf(ctx). Raft
	// messages and snapshots arrive only from voters.
	PeerRole(id uint64) (Role, bool)
	// Revoke refuses member id from now on: its connections close and
	// nothing more of it is admitted (calls to it still work).
	Revoke(id uint64)
	// Refuse and Note record a refusal of the node's own in the transport's
	// rate-limited refusal log (Note at Info level); Refusals counts the
	// refusals of a kind.
	Refuse(kind, source string, attrs ...any)
	Note(kind, source string, attrs ...any)
	Refusals(kind string) uint64
	// Close stops every stream and call and releases the listener.
	Close() error
}

// Caller makes the typed node-to-node calls, the client side of Calls. See
// calls.go for the errors each returns.
type Caller interface {
	Keepalive(ctx context.Context, to uint64, req *transportpb.KeepaliveRequest) (*transportpb.KeepaliveResponse, error)
	Renew(ctx context.Context, to uint64, req *transportpb.RenewRequest) (*transportpb.RenewResponse, error)
	Removed(ctx context.Context, to uint64, req *transportpb.RemovedRequest) (*transportpb.RemovedResponse, error)
	Leave(ctx context.Context, to uint64, req *transportpb.LeaveRequest) (*transportpb.LeaveResponse, error)
	FwdOpen(ctx context.Context, to uint64, req *transportpb.FwdOpenRequest) (*transportpb.FwdOpenResponse, error)
	FwdPropose(ctx context.Context, to uint64, req *transportpb.FwdProposeRequest) (*transportpb.FwdProposeResponse, error)
	FwdPush(ctx context.Context, to uint64, req *transportpb.FwdPushRequest) (*transportpb.FwdPushResponse, error)
	FwdStatus(ctx context.Context, to uint64, req *transportpb.FwdStatusRequest) (*transportpb.FwdStatusResponse, error)
	Inspect(ctx context.Context, to uint64, req *transportpb.InspectRequest) (*transportpb.InspectResponse, error)
	Form(ctx context.Context, to uint64, req *transportpb.FormRequest) (*transportpb.FormResponse, error)
	VersionGate(ctx context.Context, to uint64, req *transportpb.VersionGateRequest) (*transportpb.VersionGateResponse, error)
	Observe(ctx context.Context, to uint64, req *transportpb.ObserveRequest) (*transportpb.ObserveResponse, error)
}

// NewNetwork starts a node's Network from its Config, as New does.
type NewNetwork func(Config) (Network, error)

// Start is the NewNetwork of gRPC transports: New.
func Start(cfg Config) (Network, error) {
	t, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return t, nil
}

var _ Network = (*Transport)(nil)
