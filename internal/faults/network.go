package faults

import (
	"context"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// wrapNetwork returns a NewNetwork that starts inner beneath f: outgoing
// raft messages and calls pass f's blocks and message policy, and incoming
// ones f's blocks (and rewrite) before they reach the node's Handler.
func (f *Faults) wrapNetwork(inner transport.NewNetwork) transport.NewNetwork {
	return func(cfg transport.Config) (transport.Network, error) {
		cfg.Handler = &handler{Handler: cfg.Handler, f: f}
		nw, err := inner(cfg)
		if err != nil {
			return nil, err
		}
		return &network{Network: nw, f: f}, nil
	}
}

// blocked is the error of a call that a block stops: what a refused
// connection looks like.
func blocked(from, to uint64) error {
	return status.Errorf(codes.Unavailable, "call %016x → %016x blocked by fault injection", from, to)
}

// network is the outgoing side.
type network struct {
	transport.Network
	f *Faults
}

func (n *network) Send(msgs []*raftpb.Message) {
	n.Network.Send(n.f.filterOut(msgs, n.Network.Send))
}

// call gates one outgoing call: a block fails it; the message policy
// (keepalives and renewals only, policy says so) drops, delays or
// duplicates it.
func call[Req, Resp any](n *network, ctx context.Context, to uint64, req Req, policy bool,
	do func(context.Context, uint64, Req) (Resp, error)) (Resp, error) {
	var zero Resp
	if !n.f.allowsOut(to) {
		return zero, blocked(0, to)
	}
	if policy && !n.f.callFault(ctx, to, func() {
		_, _ = do(context.WithoutCancel(ctx), to, req)
	}) {
		return zero, status.Errorf(codes.Unavailable, "call to %016x dropped by fault injection", to)
	}
	return do(ctx, to, req)
}

func (n *network) Keepalive(ctx context.Context, to uint64, req *transportpb.KeepaliveRequest) (*transportpb.KeepaliveResponse, error) {
	return call(n, ctx, to, req, true, n.Network.Keepalive)
}

func (n *network) Renew(ctx context.Context, to uint64, req *transportpb.RenewRequest) (*transportpb.RenewResponse, error) {
	return call(n, ctx, to, req, true, n.Network.Renew)
}

func (n *network) Removed(ctx context.Context, to uint64, req *transportpb.RemovedRequest) (*transportpb.RemovedResponse, error) {
	return call(n, ctx, to, req, false, n.Network.Removed)
}

func (n *network) Leave(ctx context.Context, to uint64, req *transportpb.LeaveRequest) (*transportpb.LeaveResponse, error) {
	return call(n, ctx, to, req, false, n.Network.Leave)
}

func (n *network) FwdOpen(ctx context.Context, to uint64, req *transportpb.FwdOpenRequest) (*transportpb.FwdOpenResponse, error) {
	return call(n, ctx, to, req, false, n.Network.FwdOpen)
}

func (n *network) FwdPropose(ctx context.Context, to uint64, req *transportpb.FwdProposeRequest) (*transportpb.FwdProposeResponse, error) {
	return call(n, ctx, to, req, false, n.Network.FwdPropose)
}

func (n *network) FwdPush(ctx context.Context, to uint64, req *transportpb.FwdPushRequest) (*transportpb.FwdPushResponse, error) {
	return call(n, ctx, to, req, false, n.Network.FwdPush)
}

func (n *network) FwdStatus(ctx context.Context, to uint64, req *transportpb.FwdStatusRequest) (*transportpb.FwdStatusResponse, error) {
	return call(n, ctx, to, req, false, n.Network.FwdStatus)
}

func (n *network) Inspect(ctx context.Context, to uint64, req *transportpb.InspectRequest) (*transportpb.InspectResponse, error) {
	return call(n, ctx, to, req, false, n.Network.Inspect)
}

func (n *network) Form(ctx context.Context, to uint64, req *transportpb.FormRequest) (*transportpb.FormResponse, error) {
	return call(n, ctx, to, req, false, n.Network.Form)
}

func (n *network) VersionGate(ctx context.Context, to uint64, req *transportpb.VersionGateRequest) (*transportpb.VersionGateResponse, error) {
	return call(n, ctx, to, req, false, n.Network.VersionGate)
}

func (n *network) Observe(ctx context.Context, to uint64, req *transportpb.ObserveRequest) (*transportpb.ObserveResponse, error) {
	return call(n, ctx, to, req, false, n.Network.Observe)
}

// handler is the incoming side: it stands between the network and the
// node's Handler.
type handler struct {
	transport.Handler
	f *Faults
}

func (h *handler) Receive(msgs []*raftpb.Message) {
	if msgs = h.f.filterIn(msgs); len(msgs) > 0 {
		h.Handler.Receive(msgs)
	}
}

func (h *handler) AcceptSnapshot(from uint64, m *raftpb.Message) error {
	if !h.f.allowsIn(from) {
		return fmt.Errorf("snapshot from %016x blocked by fault injection", from)
	}
	return h.Handler.AcceptSnapshot(from, m)
}

// serve gates one incoming call.
func serve[Req, Resp any](h *handler, ctx context.Context, from uint64, req Req,
	do func(context.Context, uint64, Req) (Resp, error)) (Resp, error) {
	var zero Resp
	if !h.f.allowsIn(from) {
		return zero, blocked(from, 0)
	}
	return do(ctx, from, req)
}

func (h *handler) Keepalive(ctx context.Context, from uint64, req *transportpb.KeepaliveRequest) (*transportpb.KeepaliveResponse, error) {
	return serve(h, ctx, from, req, h.Handler.Keepalive)
}

func (h *handler) Renew(ctx context.Context, from uint64, req *transportpb.RenewRequest) (*transportpb.RenewResponse, error) {
	return serve(h, ctx, from, req, h.Handler.Renew)
}

func (h *handler) Removed(ctx context.Context, from uint64, req *transportpb.RemovedRequest) (*transportpb.RemovedResponse, error) {
	return serve(h, ctx, from, req, h.Handler.Removed)
}

func (h *handler) Leave(ctx context.Context, from uint64, req *transportpb.LeaveRequest) (*transportpb.LeaveResponse, error) {
	return serve(h, ctx, from, req, h.Handler.Leave)
}

func (h *handler) FwdOpen(ctx context.Context, from uint64, req *transportpb.FwdOpenRequest) (*transportpb.FwdOpenResponse, error) {
	return serve(h, ctx, from, req, h.Handler.FwdOpen)
}

func (h *handler) FwdPropose(ctx context.Context, from uint64, req *transportpb.FwdProposeRequest) (*transportpb.FwdProposeResponse, error) {
	return serve(h, ctx, from, req, h.Handler.FwdPropose)
}

func (h *handler) FwdPush(ctx context.Context, from uint64, req *transportpb.FwdPushRequest) (*transportpb.FwdPushResponse, error) {
	return serve(h, ctx, from, req, h.Handler.FwdPush)
}

func (h *handler) FwdStatus(ctx context.Context, from uint64, req *transportpb.FwdStatusRequest) (*transportpb.FwdStatusResponse, error) {
	return serve(h, ctx, from, req, h.Handler.FwdStatus)
}

func (h *handler) Inspect(ctx context.Context, from uint64, req *transportpb.InspectRequest) (*transportpb.InspectResponse, error) {
	return serve(h, ctx, from, req, h.Handler.Inspect)
}

func (h *handler) Form(ctx context.Context, from uint64, req *transportpb.FormRequest) (*transportpb.FormResponse, error) {
	return serve(h, ctx, from, req, h.Handler.Form)
}

func (h *handler) VersionGate(ctx context.Context, from uint64, req *transportpb.VersionGateRequest) (*transportpb.VersionGateResponse, error) {
	return serve(h, ctx, from, req, h.Handler.VersionGate)
}

func (h *handler) Observe(ctx context.Context, from uint64, req *transportpb.ObserveRequest) (*transportpb.ObserveResponse, error) {
	return serve(h, ctx, from, req, h.Handler.Observe)
}
