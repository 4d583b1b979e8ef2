package transport

import (
	"context"
	"errors"
	"io"
	"strconv"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/lockraft/lockraft/transport/transportpb"
)

// clusterMismatchMsg prefixes the PermissionDenied status of a cluster
// mismatch so that callers can map it back to ErrClusterMismatch.
const clusterMismatchMsg = "cluster id mismatch"

// server implements transportpb.RaftServer on behalf of a Transport.
type server struct {
	transportpb.UnimplementedRaftServer
	t *Transport
}

// authenticate checks the metadata of an incoming RPC and returns the
// sender's raft id. A wrong cluster id is logged and rejected with
// PermissionDenied; missing headers with Unauthenticated.
func (s *server) authenticate(ctx context.Context, rpc string) (uint64, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	cluster := first(md, mdCluster)
	fromStr := first(md, mdFrom)
	from, err := strconv.ParseUint(fromStr, 10, 64)
	if err != nil || from == 0 {
		s.t.log.Warn("transport: rejected rpc without a valid sender id", "rpc", rpc, "from", fromStr)
		return 0, status.Errorf(codes.Unauthenticated, "missing or invalid %s header", mdFrom)
	}
	if cluster != s.t.cfg.ClusterID {
		s.t.log.Warn("transport: rejected rpc from another cluster",
			"rpc", rpc, "from", from, "local_cluster", s.t.cfg.ClusterID, "remote_cluster", cluster)
		return 0, status.Errorf(codes.PermissionDenied, "%s: local %q, remote %q",
			clusterMismatchMsg, s.t.cfg.ClusterID, cluster)
	}
	if s.t.cfg.ServerTLS != nil && s.t.cfg.VerifyPeer != nil {
		pr, ok := grpcpeer.FromContext(ctx)
		var tlsInfo credentials.TLSInfo
		if ok {
			tlsInfo, ok = pr.AuthInfo.(credentials.TLSInfo)
		}
		if !ok {
			return 0, status.Error(codes.Unauthenticated, "no TLS peer information")
		}
		if err := s.t.cfg.VerifyPeer(from, tlsInfo.State); err != nil {
			s.t.log.Warn("transport: rejected peer certificate", "rpc", rpc, "from", from, "err", err)
			return 0, status.Errorf(codes.PermissionDenied, "peer %d: %v", from, err)
		}
	}
	s.t.noteVersion(from, first(md, mdVersion))
	return from, nil
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Stream receives the batches of one peer for as long as the peer keeps the
// stream open, delivering each batch with one Handler.Receive call.
// Messages not addressed to this node, not from the authenticated peer, or
// of type MsgSnap (which must come with its file over Snapshot) are dropped.
func (s *server) Stream(stream transportpb.Raft_StreamServer) error {
	from, err := s.authenticate(stream.Context(), "Stream")
	if err != nil {
		return err
	}
	local := s.t.cfg.LocalID
	for {
		b, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&transportpb.StreamAck{})
		}
		if err != nil {
			return err
		}
		msgs := make([]*raftpb.Message, 0, len(b.GetMsgs()))
		for _, raw := range b.GetMsgs() {
			// raw is this batch's own copy (protobuf copies bytes fields out
			// of gRPC's pooled buffer), so the message may alias it.
			m, err := decodeMessage(raw)
			if err != nil {
				s.t.log.Warn("transport: undecodable message dropped", "from", from, "err", err)
				continue
			}
			if m.GetTo() != local || m.GetFrom() != from || m.GetType() == raftpb.MessageType_MsgSnap {
				s.t.log.Debug("transport: misaddressed message dropped", "from", from,
					"msg_from", m.GetFrom(), "msg_to", m.GetTo(), "type", m.GetType())
				continue
			}
			msgs = append(msgs, m)
		}
		if len(msgs) > 0 {
			s.t.cfg.Handler.Receive(msgs)
		}
	}
}

// Call serves Transport.Call by handing the request to Handler.HandleCall.
func (s *server) Call(ctx context.Context, req *transportpb.CallRequest) (*transportpb.CallResponse, error) {
	from, err := s.authenticate(ctx, "Call")
	if err != nil {
		return nil, err
	}
	out, err := s.t.cfg.Handler.HandleCall(ctx, from, req.GetMethod(), req.GetPayload())
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return nil, status.FromContextError(err).Err()
		}
		return nil, status.Error(codes.Unknown, err.Error())
	}
	return &transportpb.CallResponse{Payload: out}, nil
}
