package transport

import (
	"context"

	"google.golang.org/grpc"

	"github.com/lockraft/lockraft/internal/netrules"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// Typed calls, client side. Each sends one request to peer to and waits for
// its answer, honouring ctx: when the deadline passes or ctx is cancelled
// the call returns an error wrapping ctx.Err() even if the remote handler is
// still running. Safe for concurrent use; calls do not queue behind Send.
//
// Errors: ErrClosed after Close; ErrUnknownPeer for an id not added;
// ErrClusterMismatch when the remote is of another cluster;
// ErrPermissionDenied, ErrInvalidRequest and ErrUnauthenticated (wrapped)
// for the remote's refusals; context.DeadlineExceeded (wrapped) when the
// deadline passed here or at the remote; other failures as gRPC status
// errors (status.Code works on them: codes.Unavailable…).

// Renew asks the leader to restart the lease of one of this member's holds.
func (t *Transport) Renew(ctx context.Context, to uint64, req *transportpb.RenewRequest) (*transportpb.RenewResponse, error) {
	return invoke(t, ctx, to, "Renew", req, transportpb.RaftClient.Renew)
}

// Removed tells member to that it is not in the configuration.
func (t *Transport) Removed(ctx context.Context, to uint64, req *transportpb.RemovedRequest) (*transportpb.RemovedResponse, error) {
	return invoke(t, ctx, to, "Removed", req, transportpb.RaftClient.Removed)
}

// Leave asks the leader to remove this member from the configuration.
func (t *Transport) Leave(ctx context.Context, to uint64, req *transportpb.LeaveRequest) (*transportpb.LeaveResponse, error) {
	return invoke(t, ctx, to, "Leave", req, transportpb.RaftClient.Leave)
}

// FwdOpen asks the leader to open a session for this light member.
func (t *Transport) FwdOpen(ctx context.Context, to uint64, req *transportpb.FwdOpenRequest) (*transportpb.FwdOpenResponse, error) {
	return invoke(t, ctx, to, "FwdOpen", req, transportpb.RaftClient.FwdOpen)
}

// FwdPropose asks the leader to propose commands of this member's sessions.
func (t *Transport) FwdPropose(ctx context.Context, to uint64, req *transportpb.FwdProposeRequest) (*transportpb.FwdProposeResponse, error) {
	return invoke(t, ctx, to, "FwdPropose", req, transportpb.RaftClient.FwdPropose)
}

// FwdPush delivers results and events to light member to.
func (t *Transport) FwdPush(ctx context.Context, to uint64, req *transportpb.FwdPushRequest) (*transportpb.FwdPushResponse, error) {
	return invoke(t, ctx, to, "FwdPush", req, transportpb.RaftClient.FwdPush)
}

// FwdStatus asks the leader about this member's acquires.
func (t *Transport) FwdStatus(ctx context.Context, to uint64, req *transportpb.FwdStatusRequest) (*transportpb.FwdStatusResponse, error) {
	return invoke(t, ctx, to, "FwdStatus", req, transportpb.RaftClient.FwdStatus)
}

// Inspect asks the leader for a read-only view, or to transfer leadership.
func (t *Transport) Inspect(ctx context.Context, to uint64, req *transportpb.InspectRequest) (*transportpb.InspectResponse, error) {
	return invoke(t, ctx, to, "Inspect", req, transportpb.RaftClient.Inspect)
}

// Form asks founder to to adopt a formation id.
func (t *Transport) Form(ctx context.Context, to uint64, req *transportpb.FormRequest) (*transportpb.FormResponse, error) {
	return invoke(t, ctx, to, "Form", req, transportpb.RaftClient.Form)
}

// VersionGate asks the leader whether every member runs the lock catalogue.
func (t *Transport) VersionGate(ctx context.Context, to uint64, req *transportpb.VersionGateRequest) (*transportpb.VersionGateResponse, error) {
	return invoke(t, ctx, to, "VersionGate", req, transportpb.RaftClient.VersionGate)
}

// Observe subscribes this light member to elections with the leader.
func (t *Transport) Observe(ctx context.Context, to uint64, req *transportpb.ObserveRequest) (*transportpb.ObserveResponse, error) {
	return invoke(t, ctx, to, "Observe", req, transportpb.RaftClient.Observe)
}

func invoke[Req, Resp any](t *Transport, ctx context.Context, to uint64, rpc string, req Req,
	f func(transportpb.RaftClient, context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	var zero Resp
	p, err := t.peer(to)
	if err != nil {
		return zero, err
	}
	resp, err := f(p.rpc, p.outgoing(ctx), req)
	if err == nil {
		return resp, nil
	}
	return zero, netrules.ClientError(ctx, rpc, to, err)
}
