package transport

import (
	"context"
	"errors"
	"fmt"
	"io"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/lockraft/lockraft/internal/netrules"
	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// Refusal kinds (Transport.Refusals).
const (
	refusedRPC      = netrules.RefusedRPC
	refusedMessage  = netrules.RefusedMessage
	refusedSnapshot = netrules.RefusedSnapshot
)

// server implements transportpb.RaftServer on behalf of a Transport.
type server struct {
	transportpb.UnimplementedRaftServer
	t *Transport
}

// authenticate returns who sent an incoming RPC: admitStream established
// and checked it (identity, cluster, role, revocation, formation) when its
// headers arrived. What is left is a formation adoption, done here before
// the RPC's first message is read.
func (s *server) authenticate(ctx context.Context, rpc string) (uint64, error) {
	a := admittedOf(ctx)
	if a == nil {
		return 0, status.Error(codes.Unauthenticated, "stream not admitted")
	}
	if s.t.adm.isRevoked(a.from) { // revoked while its connection was still closing
		return 0, s.revoked(a.from, refusedRPC)
	}
	if a.adopt != "" {
		md, _ := metadata.FromIncomingContext(ctx)
		if err := s.t.form.Check(a.from, rpc, a.adopt, first(md, mdFormationDetail), true); err != nil {
			return 0, err
		}
	}
	s.t.heardFrom(a.from)
	return a.from, nil
}

// revoked refuses input of kind from a member revoked after its stream was
// admitted.
func (s *server) revoked(from uint64, kind string) error {
	err := fmt.Errorf("%w: member %016x was revoked", errDenied, from)
	s.t.refused.Refuse(kind, views.MemberID(from).String(), "err", err)
	return status.Error(codes.PermissionDenied, err.Error())
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Stream receives the batches of one peer for as long as the peer keeps the
// stream open, delivering each batch with one Handler.Receive call. Each
// batch is charged its decoding cost (budget.go) before it is decoded, and
// refused whole (the stream ends) when it announces more entries than
// maxBatchEntries or more than its bytes may decode to (limits.go).
// Messages refused by netrules.RemoteMessageOK and undecodable ones are dropped (and
// logged once per peer and interval).
func (s *server) Stream(stream transportpb.Raft_StreamServer) error {
	ctx := stream.Context()
	from, err := s.authenticate(ctx, "Stream")
	if err != nil {
		return err
	}
	a, lim := admittedOf(ctx).peer, &s.t.adm.lim
	local := s.t.cfg.LocalID
	src := views.MemberID(from).String()
	var counts []int          // entries of each message of the batch, reused
	b := &transportpb.Batch{} // reused: each batch's messages alias a copy of their own (codec.decodeBatch)
	for {
		err := stream.RecvMsg(b)
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&transportpb.StreamAck{})
		}
		if err != nil {
			return err
		}
		if s.t.adm.isRevoked(from) {
			// Revoke closes the member's connections, but a batch already
			// received may be read before the close lands: nothing read
			// after Revoke returned is delivered.
			return s.revoked(from, refusedMessage)
		}
		raws := b.GetMsgs()
		counts = counts[:0]
		wire, entries := 0, 0
		for _, raw := range raws {
			n := countEntries(raw)
			counts = append(counts, n)
			wire += len(raw)
			entries += n
		}
		if entries > maxBatchEntries || decodeAmplified(wire, len(raws), entries) {
			s.t.refused.Refuse(refusedMessage, src, "reason", "batch announces more than its bytes may decode to",
				"bytes", wire, "msgs", len(raws), "entries", entries)
			return status.Errorf(codes.InvalidArgument, "%v: %d messages and %d entries in %d bytes", errLimit, len(raws), entries, wire)
		}
		h, err := charge(ctx, a.raftBudget, s.t.adm.raftBudget, lim.peerRaftBudget, lim.raftBudget,
			decodeCost(wire, len(raws), entries))
		if err != nil {
			return err
		}
		msgs := make([]*raftpb.Message, 0, len(raws))
		for i, raw := range raws {
			// raw is part of this batch's own copy of its bytes (not gRPC's
			// pooled buffer: codec.decodeBatch), so the message may alias it.
			m, err := decodeCounted(raw, counts[i])
			if err != nil {
				s.t.refused.Refuse(refusedMessage, src, "reason", "undecodable or over limit", "err", err)
				continue
			}
			if ok, why := netrules.RemoteMessageOK(m, local, from); !ok {
				s.t.refused.Refuse(refusedMessage, src, "reason", why, "type", m.GetType().String(),
					"msg_from", views.MemberID(m.GetFrom()), "msg_to", views.MemberID(m.GetTo()))
				continue
			}
			msgs = append(msgs, m)
		}
		if len(msgs) > 0 {
			s.t.cfg.Handler.Receive(msgs)
		}
		h.release()
	}
}

// serve runs one typed call: authenticate, then the handler.
func serve[Req, Resp any](s *server, ctx context.Context, rpc string, req Req,
	h func(context.Context, uint64, Req) (Resp, error)) (Resp, error) {
	var zero Resp
	from, err := s.authenticate(ctx, rpc)
	if err != nil {
		return zero, err
	}
	resp, err := h(ctx, from, req)
	if err != nil {
		return zero, netrules.CallError(err)
	}
	return resp, nil
}

func (s *server) Keepalive(ctx context.Context, req *transportpb.KeepaliveRequest) (*transportpb.KeepaliveResponse, error) {
	return serve(s, ctx, "Keepalive", req, s.t.cfg.Handler.Keepalive)
}

func (s *server) Renew(ctx context.Context, req *transportpb.RenewRequest) (*transportpb.RenewResponse, error) {
	return serve(s, ctx, "Renew", req, s.t.cfg.Handler.Renew)
}

func (s *server) Removed(ctx context.Context, req *transportpb.RemovedRequest) (*transportpb.RemovedResponse, error) {
	return serve(s, ctx, "Removed", req, s.t.cfg.Handler.Removed)
}

func (s *server) Leave(ctx context.Context, req *transportpb.LeaveRequest) (*transportpb.LeaveResponse, error) {
	return serve(s, ctx, "Leave", req, s.t.cfg.Handler.Leave)
}

func (s *server) FwdOpen(ctx context.Context, req *transportpb.FwdOpenRequest) (*transportpb.FwdOpenResponse, error) {
	return serve(s, ctx, "FwdOpen", req, s.t.cfg.Handler.FwdOpen)
}

func (s *server) FwdPropose(ctx context.Context, req *transportpb.FwdProposeRequest) (*transportpb.FwdProposeResponse, error) {
	return serve(s, ctx, "FwdPropose", req, s.t.cfg.Handler.FwdPropose)
}

func (s *server) FwdPush(ctx context.Context, req *transportpb.FwdPushRequest) (*transportpb.FwdPushResponse, error) {
	return serve(s, ctx, "FwdPush", req, s.t.cfg.Handler.FwdPush)
}

func (s *server) FwdStatus(ctx context.Context, req *transportpb.FwdStatusRequest) (*transportpb.FwdStatusResponse, error) {
	return serve(s, ctx, "FwdStatus", req, s.t.cfg.Handler.FwdStatus)
}

func (s *server) Inspect(ctx context.Context, req *transportpb.InspectRequest) (*transportpb.InspectResponse, error) {
	return serve(s, ctx, "Inspect", req, s.t.cfg.Handler.Inspect)
}

func (s *server) Form(ctx context.Context, req *transportpb.FormRequest) (*transportpb.FormResponse, error) {
	return serve(s, ctx, "Form", req, s.t.cfg.Handler.Form)
}

func (s *server) VersionGate(ctx context.Context, req *transportpb.VersionGateRequest) (*transportpb.VersionGateResponse, error) {
	return serve(s, ctx, "VersionGate", req, s.t.cfg.Handler.VersionGate)
}

func (s *server) Observe(ctx context.Context, req *transportpb.ObserveRequest) (*transportpb.ObserveResponse, error) {
	return serve(s, ctx, "Observe", req, s.t.cfg.Handler.Observe)
}
