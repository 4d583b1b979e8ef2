package transport

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockraft/lockraft/transport/transportpb"
)

// Call sends an opaque request to peer to and waits for its Handler.HandleCall
// answer. It honours ctx: when the deadline passes or ctx is cancelled, Call
// returns an error wrapping ctx.Err() even if the remote handler is still
// running. Safe for concurrent use; it does not queue behind Send.
//
// Errors: ErrClosed after Close; ErrUnknownPeer for an id not added;
// ErrClusterMismatch (wrapped) when the remote is of another cluster;
// context.DeadlineExceeded (wrapped) when the deadline passed here or at the
// remote; the
// remote handler's error as a gRPC status error (status.Code works on it);
// transport failures as gRPC status errors (codes.Unavailable…).
func (t *Transport) Call(ctx context.Context, to uint64, method string, req []byte) ([]byte, error) {
	p, err := t.peer(to)
	if err != nil {
		return nil, err
	}
	resp, err := p.rpc.Call(p.outgoing(ctx), &transportpb.CallRequest{Method: method, Payload: req})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("transport: call %s to %d: %w", method, to, ctx.Err())
		}
		st, _ := status.FromError(err)
		switch {
		case st.Code() == codes.DeadlineExceeded:
			// The server sees the propagated deadline first and may answer
			// before ctx itself has expired here.
			return nil, fmt.Errorf("transport: call %s to %d: %w (%s)", method, to, context.DeadlineExceeded, st.Message())
		case st.Code() == codes.PermissionDenied && strings.HasPrefix(st.Message(), clusterMismatchMsg):
			return nil, fmt.Errorf("%w: call %s to %d: %s", ErrClusterMismatch, method, to, st.Message())
		case st.Code() == codes.PermissionDenied && strings.HasPrefix(st.Message(), formationMismatchMsg):
			return nil, fmt.Errorf("%w: call %s to %d: %s", ErrFormationMismatch, method, to, st.Message())
		}
		return nil, err
	}
	return resp.GetPayload(), nil
}
