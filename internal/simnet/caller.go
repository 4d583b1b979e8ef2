package simnet

import (
	"context"

	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// The typed calls of transport.Caller, over the network (calls.go). Each
// returns what transport's client returns: transport.ErrClosed after Close,
// transport.ErrUnknownPeer (wrapped) for an id not added, the server's
// refusals mapped to transport.ErrClusterMismatch, ErrFormationMismatch,
// ErrPermissionDenied, ErrInvalidRequest or ErrUnauthenticated (wrapped),
// an error wrapping ctx.Err() or context.DeadlineExceeded when the deadline
// passed, and gRPC status errors otherwise (codes.Unavailable for a
// refused connection).

var _ transport.Network = (*Endpoint)(nil)

func (e *Endpoint) Keepalive(ctx context.Context, to uint64, req *transportpb.KeepaliveRequest) (*transportpb.KeepaliveResponse, error) {
	return invoke(e, ctx, to, "Keepalive", req, transport.Calls.Keepalive)
}

func (e *Endpoint) Renew(ctx context.Context, to uint64, req *transportpb.RenewRequest) (*transportpb.RenewResponse, error) {
	return invoke(e, ctx, to, "Renew", req, transport.Calls.Renew)
}

func (e *Endpoint) Removed(ctx context.Context, to uint64, req *transportpb.RemovedRequest) (*transportpb.RemovedResponse, error) {
	return invoke(e, ctx, to, "Removed", req, transport.Calls.Removed)
}

func (e *Endpoint) Leave(ctx context.Context, to uint64, req *transportpb.LeaveRequest) (*transportpb.LeaveResponse, error) {
	return invoke(e, ctx, to, "Leave", req, transport.Calls.Leave)
}

func (e *Endpoint) FwdOpen(ctx context.Context, to uint64, req *transportpb.FwdOpenRequest) (*transportpb.FwdOpenResponse, error) {
	return invoke(e, ctx, to, "FwdOpen", req, transport.Calls.FwdOpen)
}

func (e *Endpoint) FwdPropose(ctx context.Context, to uint64, req *transportpb.FwdProposeRequest) (*transportpb.FwdProposeResponse, error) {
	return invoke(e, ctx, to, "FwdPropose", req, transport.Calls.FwdPropose)
}

func (e *Endpoint) FwdPush(ctx context.Context, to uint64, req *transportpb.FwdPushRequest) (*transportpb.FwdPushResponse, error) {
	return invoke(e, ctx, to, "FwdPush", req, transport.Calls.FwdPush)
}

func (e *Endpoint) FwdStatus(ctx context.Context, to uint64, req *transportpb.FwdStatusRequest) (*transportpb.FwdStatusResponse, error) {
	return invoke(e, ctx, to, "FwdStatus", req, transport.Calls.FwdStatus)
}

func (e *Endpoint) Inspect(ctx context.Context, to uint64, req *transportpb.InspectRequest) (*transportpb.InspectResponse, error) {
	return invoke(e, ctx, to, "Inspect", req, transport.Calls.Inspect)
}

func (e *Endpoint) Form(ctx context.Context, to uint64, req *transportpb.FormRequest) (*transportpb.FormResponse, error) {
	return invoke(e, ctx, to, "Form", req, transport.Calls.Form)
}

func (e *Endpoint) VersionGate(ctx context.Context, to uint64, req *transportpb.VersionGateRequest) (*transportpb.VersionGateResponse, error) {
	return invoke(e, ctx, to, "VersionGate", req, transport.Calls.VersionGate)
}

func (e *Endpoint) Observe(ctx context.Context, to uint64, req *transportpb.ObserveRequest) (*transportpb.ObserveResponse, error) {
	return invoke(e, ctx, to, "Observe", req, transport.Calls.Observe)
}
