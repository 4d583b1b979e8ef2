package simnet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/internal/netrules"
	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// Typed calls
//
// A call travels as transport's unary RPCs do: the request (a deep copy)
// crosses the call link after its delay; at the server it passes
// authenticate (calls never make a node adopt a formation) and runs the
// Handler's method on a goroutine of its own, with a context that carries
// the caller's deadline and ends when the caller gives up or the server's
// endpoint closes; the answer (a deep copy) or the error, turned into a
// gRPC status as transport's server does (netrules.CallError), crosses back
// after the return link's delay, and the caller maps it as transport's
// client does (netrules.ClientError). A call that finds its link cut, no
// endpoint at the address, or is lost to the policy's Drop fails with
// codes.Unavailable, as a refused connection does; an answer whose return
// link is cut when it comes back turns into codes.Unavailable too.

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

// call is one call in flight.
type call struct {
	caller *Endpoint
	method string
	ctx    context.Context // the caller's
	env    envelope
	reply  chan callResult
	// serve runs the server's Handler method on the request's copy.
	serve func(ctx context.Context, h transport.Calls, from uint64) (proto.Message, error)
}

type callResult struct {
	resp proto.Message
	err  error // a status error
}

// clone deep-copies m; a nil message becomes an empty one (what the other
// end decodes from gRPC's encoding of nil).
func clone[T proto.Message](m T) T {
	if !m.ProtoReflect().IsValid() {
		return m.ProtoReflect().Type().New().Interface().(T)
	}
	return proto.Clone(m).(T)
}

// invoke is the client side of every call.
func invoke[Req, Resp proto.Message](e *Endpoint, ctx context.Context, to uint64, method string, req Req,
	h func(transport.Calls, context.Context, uint64, Req) (Resp, error)) (Resp, error) {
	var zero Resp
	n := e.n
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("transport: %s to %016x: %w", method, to, err)
	}
	reqCopy := clone(req)
	c := &call{
		caller: e,
		method: method,
		ctx:    ctx,
		env:    e.envelope(false),
		reply:  make(chan callResult, 1),
		serve: func(ctx context.Context, calls transport.Calls, from uint64) (proto.Message, error) {
			resp, err := h(calls, ctx, from, reqCopy)
			if err != nil {
				return nil, err
			}
			return clone(resp), nil
		},
	}
	now := time.Now()
	n.mu.Lock()
	if e.closed || n.closed {
		n.mu.Unlock()
		return zero, transport.ErrClosed
	}
	addr, known := e.peers[to]
	if !known {
		n.mu.Unlock()
		return zero, fmt.Errorf("%w: %016x", transport.ErrUnknownPeer, to)
	}
	ev := n.rpcEventLocked(now, e.id, to, chCall, evCall, addr)
	ev.call = c
	n.scheduleLocked(ev)
	n.mu.Unlock()
	n.poke()

	select {
	case r := <-c.reply:
		if r.err == nil {
			return r.resp.(Resp), nil
		}
		return zero, netrules.ClientError(ctx, method, to, r.err)
	case <-ctx.Done():
		return zero, fmt.Errorf("transport: %s to %016x: %w", method, to, ctx.Err())
	case <-e.ctx.Done():
		return zero, transport.ErrClosed
	}
}

// arriveCall executes a call's arrival at its server.
func (n *Network) arriveCall(ev *event) {
	c := ev.call
	dst, why := n.reach(c.caller, ev.from, ev.to, ev.lost)
	if dst == nil {
		n.record(Event{Kind: Dropped, From: ev.from, To: ev.to, Method: c.method, Code: codes.Unavailable, Why: why})
		if why != lostSender {
			n.answer(ev, nil, status.Errorf(codes.Unavailable, "simnet: connection refused: %s (%s)", Addr(ev.to), why))
		}
		return
	}
	if err := dst.authenticate(ev.from, c.method, c.env, false); err != nil {
		n.record(Event{Kind: Refused, From: ev.from, To: ev.to, Method: c.method, Code: status.Code(err), Why: refusalWhy(err)})
		dst.leave()
		n.answer(ev, nil, err)
		return
	}
	n.record(Event{Kind: CallArrived, From: ev.from, To: ev.to, Method: c.method})
	go n.serveCall(dst, ev)
}

// serveCall runs the server's Handler method, as a gRPC server's handler
// goroutine does, and sends its answer back. It releases dst when done.
func (n *Network) serveCall(dst *Endpoint, ev *event) {
	defer dst.leave()
	c := ev.call
	ctx, cancel := context.WithCancel(dst.ctx)
	defer cancel()
	if dl, ok := c.ctx.Deadline(); ok {
		var cancelDL context.CancelFunc
		ctx, cancelDL = context.WithDeadline(ctx, dl)
		defer cancelDL()
	}
	// A caller that gives up cancels the server's context; a deadline
	// ends it by the server's own copy, with DeadlineExceeded.
	stop := context.AfterFunc(c.ctx, func() {
		if !errors.Is(c.ctx.Err(), context.DeadlineExceeded) {
			cancel()
		}
	})
	defer stop()
	ctx = transport.ContextWithCaller(ctx, transport.Peer{ID: ev.from, Role: c.env.role})
	resp, err := c.serve(ctx, dst.cfg.Handler, ev.from)
	switch {
	case dst.ctx.Err() != nil:
		// The server closed: its connections went first, as a stopped gRPC
		// server's do, and the handler's answer with them.
		resp, err = nil, status.Error(codes.Unavailable, "simnet: the server closed")
	case err != nil:
		err = netrules.CallError(err)
	}
	n.answer(ev, resp, err)
}

// answer queues a call's outcome for its caller, after the return link's
// delay from now.
func (n *Network) answer(ev *event, resp proto.Message, err error) {
	n.mu.Lock()
	at := time.Now().Add(n.faults.policyOf(ev.to, ev.from).delay(ev.back))
	n.scheduleLocked(&event{at: at, from: ev.from, to: ev.to, ch: chReply, seq: ev.seq, kind: evReply, call: ev.call,
		resp: resp, err: err})
	n.mu.Unlock()
	n.poke()
}

// returnCall executes a call's outcome at its caller.
func (n *Network) returnCall(ev *event) {
	c := ev.call
	n.mu.Lock()
	err, why := ev.err, ""
	if err == nil && !n.faults.up(ev.to, ev.from) {
		err, why = status.Error(codes.Unavailable, "simnet: "+lostReturned), lostReturned
	}
	n.mu.Unlock()
	n.record(Event{Kind: CallReturned, From: ev.from, To: ev.to, Method: c.method, Code: status.Code(err), Why: why})
	c.reply <- callResult{resp: ev.resp, err: err}
}
