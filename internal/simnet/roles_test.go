package simnet

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// callers records CallerOf of every call a recorder serves.
func callers(r *recorder) func() []transport.Peer {
	var mu sync.Mutex
	var seen []transport.Peer
	r.Call = func(ctx context.Context, _ uint64, method string, _ proto.Message) (proto.Message, error) {
		p, _ := transport.CallerOf(ctx)
		mu.Lock()
		seen = append(seen, p)
		mu.Unlock()
		return &transportpb.KeepaliveResponse{}, nil
	}
	return func() []transport.Peer {
		mu.Lock()
		defer mu.Unlock()
		return append([]transport.Peer(nil), seen...)
	}
}

// An endpoint's role is its Config.Role (PlaintextRole if zero), as a
// certificate's would be: a light endpoint's raft messages are refused, its
// calls are served with its role in their ctx, and peers see it with
// PeerRole. Without roles every endpoint is PlaintextRole, as every peer of
// a plaintext gRPC transport is.
func TestRolesAsCertificatesWouldSay(t *testing.T) {
	n := New(1)
	t.Cleanup(func() { _ = n.Close() })
	light := start(t, n, 1, func(c *transport.Config) { c.Role = transport.RoleLight })
	voter := start(t, n, 2, func(c *transport.Config) { c.Role = transport.RoleVoter })
	plain := start(t, n, 3, nil)
	connect(map[uint64]*node{1: light, 2: voter, 3: plain})
	seen := callers(voter.rec)

	light.ep.Send([]*raftpb.Message{app(1, 2, 1)})
	plain.ep.Send([]*raftpb.Message{app(3, 2, 2)})
	_, err := light.ep.Keepalive(context.Background(), 2, &transportpb.KeepaliveRequest{})
	require.NoError(t, err)
	_, err = plain.ep.Keepalive(context.Background(), 2, &transportpb.KeepaliveRequest{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(voter.rec.Received()) == 1 }, 5*time.Second, time.Millisecond)
	require.Equal(t, uint64(3), voter.rec.Received()[0].GetFrom())
	require.EqualValues(t, 1, voter.ep.Refusals(refusedRPC))
	require.ElementsMatch(t, []transport.Peer{{ID: 1, Role: transport.RoleLight}, {ID: 3, Role: transport.PlaintextRole}}, seen())

	for id, want := range map[uint64]transport.Role{1: transport.RoleLight, 2: transport.RoleVoter, 3: transport.PlaintextRole} {
		r, ok := light.ep.PeerRole(id)
		require.True(t, ok)
		require.Equal(t, want, r)
	}
	_, ok := light.ep.PeerRole(9)
	require.False(t, ok)
}

// Revoke, over both networks: what the revoked member sends is refused
// (ErrPermissionDenied for its calls, its raft messages dropped), and calls
// to it still work; the caller's role reaches the handler.
func TestRevokeMatchesTheGRPCTransport(t *testing.T) {
	for name, mk := range map[string]func(*testing.T, func(*transport.Config), func(*transport.Config)) pair{
		"grpc": grpcPair, "sim": simPair,
	} {
		t.Run(name, func(t *testing.T) {
			p := mk(t, nil, nil)
			seen := callers(p.rec2)
			_, err := p.caller.Keepalive(context.Background(), 2, &transportpb.KeepaliveRequest{})
			require.NoError(t, err)
			require.Equal(t, []transport.Peer{{ID: 1, Role: transport.PlaintextRole}}, seen())
			r, ok := p.receiver.PeerRole(1)
			require.True(t, ok)
			require.Equal(t, transport.PlaintextRole, r)

			p.receiver.Revoke(1)
			// gRPC: the revoked member's connection is closed; its next
			// connection is admitted (plaintext: no certificate to refuse)
			// and its calls refused.
			require.Eventually(t, func() bool {
				_, err = p.caller.Keepalive(context.Background(), 2, &transportpb.KeepaliveRequest{})
				return err != nil && status.Code(err) != codes.Unavailable
			}, 5*time.Second, time.Millisecond)
			require.ErrorIs(t, err, transport.ErrPermissionDenied)
			require.ErrorContains(t, err, "revoked")
			p.caller.Send([]*raftpb.Message{app(1, 2, 7)})
			require.Eventually(t, func() bool { return p.receiver.Refusals(refusedRPC) >= 2 }, 5*time.Second, time.Millisecond)
			require.Empty(t, p.rec2.Received())
			_, err = p.receiver.Keepalive(context.Background(), 1, &transportpb.KeepaliveRequest{})
			require.NoError(t, err)
		})
	}
}
