package transport

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/transport/transportpb"
)

// keepalivesSeen makes n's keepalives answer by session (session%3 + 1, so
// that an answer shows which request it is for), waiting for release when
// a session is blocked, and records each one's caller and the stream it
// came on (its ctx: one per stream, or per call).
type keepalivesSeen struct {
	mu       sync.Mutex
	sessions []uint64
	from     []uint64
	streams  map[context.Context]bool
	blocked  uint64
	release  chan struct{}
}

func seeKeepalives(n *node) *keepalivesSeen {
	k := &keepalivesSeen{streams: map[context.Context]bool{}, release: make(chan struct{})}
	n.rec.Call = func(ctx context.Context, from uint64, method string, req proto.Message) (proto.Message, error) {
		s := req.(*transportpb.KeepaliveRequest).GetSession()
		k.mu.Lock()
		k.sessions = append(k.sessions, s)
		k.from = append(k.from, from)
		k.streams[ctx] = true
		blocked := s == k.blocked
		k.mu.Unlock()
		if blocked {
			select {
			case <-k.release:
			case <-ctx.Done():
			}
		}
		return &transportpb.KeepaliveResponse{Status: transportpb.KeepaliveStatus(s%3 + 1)}, nil
	}
	return k
}

func (k *keepalivesSeen) count() (calls, streams int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.sessions), len(k.streams)
}

func keepaliveOK(t *testing.T, n *node, to, session uint64) {
	t.Helper()
	resp, err := n.t.Keepalive(context.Background(), to, &transportpb.KeepaliveRequest{Session: session})
	require.NoError(t, err)
	require.Equal(t, transportpb.KeepaliveStatus(session%3+1), resp.GetStatus(), "answer to session %d", session)
}

// A member's keepalives to the leader (what S5 and L3 rest on) travel on
// one stream: each reaches the leader's handler once, from the member, and
// gets its own answer; a keepalive whose caller gives up ends the stream,
// and the next opens another and is not answered with the late one's
// answer; keepalives to another leader end the stream to the first.
func TestKeepalivesShareOneStream(t *testing.T) {
	p := newPKI(t)
	a := newNode(t, "c1", 1, withTLS(p.member("c1", 1)))
	b := newNode(t, "c1", 2, withTLS(p.memberRole("c1", 2, "light")))
	c := newNode(t, "c1", 3, withTLS(p.member("c1", 3)))
	connect(a, b, c)
	seenA, seenC := seeKeepalives(a), seeKeepalives(c)

	for s := uint64(1); s <= 20; s++ {
		keepaliveOK(t, b, 1, s)
	}
	calls, streams := seenA.count()
	require.Equal(t, 20, calls)
	require.Equal(t, 1, streams, "twenty keepalives, one stream")
	seenA.mu.Lock()
	for i, from := range seenA.from {
		require.EqualValues(t, 2, from)
		require.EqualValues(t, i+1, seenA.sessions[i])
	}
	seenA.blocked = 21
	seenA.mu.Unlock()

	// Session 21's answer is held past the caller's deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := b.t.Keepalive(ctx, 1, &transportpb.KeepaliveRequest{Session: 21})
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(seenA.release)
	keepaliveOK(t, b, 1, 22)
	calls, streams = seenA.count()
	require.Equal(t, 22, calls)
	require.Equal(t, 2, streams, "the stream the late answer was due on was ended")

	// Another leader: the stream to the first ends (it is no longer one of
	// a's peer's streams), and the keepalives go on to the new one.
	keepaliveOK(t, b, 3, 23)
	require.Eventually(t, func() bool {
		a.t.adm.mu.Lock()
		defer a.t.adm.mu.Unlock()
		ps := a.t.adm.peers[2]
		ps.mu.Lock()
		defer ps.mu.Unlock()
		return ps.keepalives == nil
	}, waitFor, tick, "b's keepalive stream to a still open")
	keepaliveOK(t, b, 3, 24)
	calls, streams = seenC.count()
	require.Equal(t, 2, calls)
	require.Equal(t, 1, streams)
}

// A leader that does not serve the keepalive stream (a version before it)
// is called instead: the keepalive still reaches it and is answered.
func TestKeepaliveCallsALeaderWithoutTheStream(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	old := &oldLeader{}
	transportpb.RegisterRaftServer(srv, old)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	b := newNode(t, "c1", 2)
	b.t.AddPeer(1, lis.Addr().String())
	for s := uint64(1); s <= 3; s++ {
		keepaliveOK(t, b, 1, s)
	}
	old.mu.Lock()
	defer old.mu.Unlock()
	require.Equal(t, []uint64{1, 2, 3}, old.sessions)
	pr, err := b.t.peer(1)
	require.NoError(t, err)
	require.True(t, time.Now().Before(pr.ka.callUntil), "the stream is not tried before each call")
}

// oldLeader serves Keepalive as a call only, as a leader did before the
// stream.
type oldLeader struct {
	transportpb.UnimplementedRaftServer
	mu       sync.Mutex
	sessions []uint64
}

func (o *oldLeader) Keepalive(_ context.Context, req *transportpb.KeepaliveRequest) (*transportpb.KeepaliveResponse, error) {
	o.mu.Lock()
	o.sessions = append(o.sessions, req.GetSession())
	o.mu.Unlock()
	return &transportpb.KeepaliveResponse{Status: transportpb.KeepaliveStatus(req.GetSession()%3 + 1)}, nil
}

// The leader's refusal of one keepalive (not the member's session) ends the
// stream with the call's error, typed as a call's; the member's next
// keepalive is served on a new stream.
func TestKeepaliveStreamRefusal(t *testing.T) {
	a := newNode(t, "c1", 1)
	b := newNode(t, "c1", 2)
	connect(a, b)
	a.rec.Call = func(ctx context.Context, from uint64, method string, req proto.Message) (proto.Message, error) {
		if req.(*transportpb.KeepaliveRequest).GetSession() == 13 {
			return nil, ErrPermissionDenied
		}
		return &transportpb.KeepaliveResponse{Status: transportpb.KeepaliveStatus_KEEPALIVE_STATUS_OK}, nil
	}
	_, err := b.t.Keepalive(context.Background(), 1, &transportpb.KeepaliveRequest{Session: 12})
	require.NoError(t, err)
	_, err = b.t.Keepalive(context.Background(), 1, &transportpb.KeepaliveRequest{Session: 13})
	require.True(t, errors.Is(err, ErrPermissionDenied), "%v", err)
	resp, err := b.t.Keepalive(context.Background(), 1, &transportpb.KeepaliveRequest{Session: 14})
	require.NoError(t, err)
	require.Equal(t, transportpb.KeepaliveStatus_KEEPALIVE_STATUS_OK, resp.GetStatus())
}
