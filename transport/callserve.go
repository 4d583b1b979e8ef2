package transport

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/transport/transportpb"
)

// Serving the typed calls
//
// gRPC reads and decodes a unary request before any handler or interceptor
// of the server runs, so a peer could make this node read and decode as
// many requests at once as it has streams. The calls are therefore served
// as streams of the Raft service (the client still makes a unary call: the
// frames are the same), and serveCall runs before the request is read: it
// reads one request of the peer at a time (callReadsPerPeer), charges its
// bytes to the peer's and the total call budgets (budget.go) before
// decoding it, and holds them until the handler returns.

// raftService is transportpb.Raft_ServiceDesc with the calls as streams.
var raftService = grpc.ServiceDesc{
	ServiceName: transportpb.Raft_ServiceDesc.ServiceName,
	HandlerType: transportpb.Raft_ServiceDesc.HandlerType,
	Streams: append(append([]grpc.StreamDesc(nil), transportpb.Raft_ServiceDesc.Streams...),
		callDesc("Keepalive", (*server).Keepalive),
		callDesc("Renew", (*server).Renew),
		callDesc("Removed", (*server).Removed),
		callDesc("Leave", (*server).Leave),
		callDesc("FwdOpen", (*server).FwdOpen),
		callDesc("FwdPropose", (*server).FwdPropose),
		callDesc("FwdPush", (*server).FwdPush),
		callDesc("FwdStatus", (*server).FwdStatus),
		callDesc("Inspect", (*server).Inspect),
		callDesc("Form", (*server).Form),
		callDesc("VersionGate", (*server).VersionGate),
		callDesc("Observe", (*server).Observe),
		keepaliveStreamDesc,
	),
	Metadata: transportpb.Raft_ServiceDesc.Metadata,
}

// callDesc serves call name with h.
func callDesc[Req interface {
	proto.Message
	*R
}, R any, Resp proto.Message](name string, h func(*server, context.Context, Req) (Resp, error)) grpc.StreamDesc {
	return grpc.StreamDesc{StreamName: name, ClientStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
		s := srv.(*server)
		req := Req(new(R))
		release, err := s.readCall(ss, req)
		if err != nil {
			return err
		}
		defer release.release()
		resp, err := h(s, ss.Context(), req)
		if err != nil {
			return err
		}
		return ss.SendMsg(resp)
	}}
}

// rawRequest is a request as read, not yet decoded: the codec keeps the
// bytes (codec.Unmarshal), and the reader frees them.
type rawRequest struct {
	buf mem.Buffer
}

// readCall reads one request of the stream's peer into req: its turn
// among the peer's requests, the budgets, then decoding.
func (s *server) readCall(ss grpc.ServerStream, req proto.Message) (held, error) {
	ctx := ss.Context()
	a := admittedOf(ctx)
	if a == nil {
		return held{}, status.Error(codes.Unauthenticated, "stream not admitted")
	}
	p := a.peer
	select {
	case p.callRead <- struct{}{}:
	case <-ctx.Done():
		return held{}, status.FromContextError(ctx.Err()).Err()
	}
	var raw rawRequest
	err := ss.RecvMsg(&raw)
	if err != nil {
		<-p.callRead
		if errors.Is(err, io.EOF) {
			return held{}, status.Error(codes.InvalidArgument, "no request")
		}
		return held{}, err
	}
	h, err := s.decodeCall(ctx, p, raw, req)
	<-p.callRead
	return h, err
}

// decodeCall charges a received request's bytes to its peer's and the
// total call budgets, then decodes it into req; raw's buffer is freed. The
// budgets are held until the returned held is released.
func (s *server) decodeCall(ctx context.Context, p *peerState, raw rawRequest, req proto.Message) (held, error) {
	lim := &s.t.adm.lim
	b := raw.buf.ReadOnlyData()
	h, err := charge(ctx, p.callBudget, s.t.adm.callBudget, lim.peerCallBudget, lim.callBudget, int64(len(b)))
	if err != nil {
		raw.buf.Free()
		return held{}, err
	}
	err = s.t.codec.decode(b, req)
	raw.buf.Free()
	if err != nil {
		h.release()
		return held{}, status.Error(codes.InvalidArgument, err.Error())
	}
	return h, nil
}
