package transport

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockraft/lockraft/internal/netrules"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// Keepalives over one stream
//
// A member keeps its session alive with one keepalive to the leader every
// KeepaliveInterval. As a unary call each one is a new HTTP/2 stream: its
// headers (cluster, sender, formation, version) encoded and parsed, the
// admission tap run, a server goroutine and its context made, trailers
// sent. A fleet's leader takes one from every member each interval, so that
// work grows with the fleet. Keepalives therefore travel on one long-lived
// stream per member and leader (KeepaliveStream), admitted once: each is
// then one small message each way, served exactly as the call is (the same
// Handler.Keepalive, the same budget per request, revocation checked per
// request).
//
// The stream is strictly one request, one answer: a caller that gives up
// (its ctx ends) ends the stream, and the next keepalive opens a new one, so
// a late answer is never taken for a later request's. A leader that does not
// serve the stream (a version before it: codes.Unimplemented) is called as
// before, and asked again for the stream after keepaliveStreamRetry.

// keepaliveStreamName is the stream's method within the Raft service. It is
// registered by hand (raftService), like the calls: transport.proto need not
// change for a stream of its existing messages.
const keepaliveStreamName = "KeepaliveStream"

// keepaliveStreamMethod is its full method name.
var keepaliveStreamMethod = "/" + transportpb.Raft_ServiceDesc.ServiceName + "/" + keepaliveStreamName

// keepaliveStreamRetry is how long a peer that did not know the stream is
// called instead (it may be upgraded meanwhile).
const keepaliveStreamRetry = time.Minute

// maxKeepaliveRequest bounds one request on the stream, before decoding: a
// KeepaliveRequest is one varint.
const maxKeepaliveRequest = 64

var keepaliveStreamDesc = grpc.StreamDesc{
	StreamName:    keepaliveStreamName,
	ServerStreams: true,
	ClientStreams: true,
	Handler: func(srv any, ss grpc.ServerStream) error {
		return srv.(*server).keepaliveStream(ss)
	},
}

// keepaliveStream serves one member's keepalives until it ends the stream
// (or another of its keepalive streams replaces this one: admit). Each
// request is served as a Keepalive call; a refusal ends the stream with the
// call's status.
func (s *server) keepaliveStream(ss grpc.ServerStream) error {
	ctx := ss.Context()
	from, err := s.authenticate(ctx, "Keepalive")
	if err != nil {
		return err
	}
	a := admittedOf(ctx)
	for {
		var raw rawRequest
		if err := ss.RecvMsg(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return nil // the member closed it
			}
			return err
		}
		if n := len(raw.buf.ReadOnlyData()); n > maxKeepaliveRequest {
			raw.buf.Free()
			return status.Errorf(codes.InvalidArgument, "keepalive request of %d bytes", n)
		}
		req := &transportpb.KeepaliveRequest{} // the handler may keep it, as a call's
		h, err := s.decodeCall(ctx, a.peer, raw, req)
		if err != nil {
			return err
		}
		if s.t.adm.isRevoked(from) {
			h.release()
			return s.revoked(from, refusedRPC)
		}
		s.t.heardFrom(from)
		resp, err := s.t.cfg.Handler.Keepalive(ctx, from, req)
		h.release()
		if err != nil {
			return netrules.CallError(err)
		}
		if err := ss.SendMsg(resp); err != nil {
			return err
		}
	}
}

// keepaliveClient is a peer's keepalive stream, client side.
type keepaliveClient struct {
	mu     sync.Mutex // held by the one keepalive on the stream
	stream grpc.ClientStream
	cancel context.CancelFunc // ends stream
	// callUntil: the peer did not know the stream; call it until then.
	callUntil time.Time
	// idle ends the stream once no keepalive used it for IdleTimeout (the
	// member closed its session, or keeps it alive elsewhere): an open
	// stream keeps its connection out of gRPC's idle mode.
	idle *time.Timer
}

// Keepalive asks the leader to extend one of this member's sessions: on the
// member's keepalive stream to it (keepalives.go), or as a call to a leader
// that does not serve the stream, or while another keepalive to it is in
// flight. It ends this member's keepalive stream to any other peer (a member
// keeps its sessions alive with one leader at a time). Errors as for the
// other calls.
func (t *Transport) Keepalive(ctx context.Context, to uint64, req *transportpb.KeepaliveRequest) (*transportpb.KeepaliveResponse, error) {
	p, err := t.peer(to)
	if err != nil {
		return nil, err
	}
	t.keepaliveTo(p)
	if resp, err, ok := p.keepalive(ctx, req); ok {
		return resp, err
	}
	return invoke(t, ctx, to, "Keepalive", req, transportpb.RaftClient.Keepalive)
}

// keepaliveTo notes p as the peer this member's keepalives go to, ending
// its stream to the previous one.
func (t *Transport) keepaliveTo(p *peer) {
	t.kaMu.Lock()
	old := t.kaPeer
	t.kaPeer = p
	t.kaMu.Unlock()
	if old != nil && old != p {
		old.ka.close()
	}
}

// keepalive sends req on p's keepalive stream and waits for its answer;
// false when the caller should make the call instead.
func (p *peer) keepalive(ctx context.Context, req *transportpb.KeepaliveRequest) (*transportpb.KeepaliveResponse, error, bool) {
	k := &p.ka
	if !k.mu.TryLock() {
		return nil, nil, false
	}
	defer k.mu.Unlock()
	if time.Now().Before(k.callUntil) {
		return nil, nil, false
	}
	if k.idle != nil {
		k.idle.Stop()
	}
	defer k.armIdle(p.t.cfg.IdleTimeout)
	// A stream that served earlier keepalives may have died since (the
	// leader restarted, the connection broke) where a call would open a new
	// connection: such a failure is tried once more on a new stream.
	for attempt := 0; ; attempt++ {
		reused := k.stream != nil
		resp, err := k.roundTrip(ctx, p, req)
		if err == nil {
			return resp, nil, true
		}
		k.closeLocked()
		if status.Code(err) == codes.Unimplemented {
			k.callUntil = time.Now().Add(keepaliveStreamRetry)
			return nil, nil, false
		}
		if ctx.Err() != nil || !reused || attempt > 0 || !brokenStream(err) {
			return nil, netrules.ClientError(ctx, "Keepalive", p.id, err), true
		}
	}
}

// roundTrip sends one request on the stream (opened first if need be) and
// receives its answer; ctx ending ends the stream. Under k.mu.
func (k *keepaliveClient) roundTrip(ctx context.Context, p *peer, req *transportpb.KeepaliveRequest) (*transportpb.KeepaliveResponse, error) {
	if k.stream == nil {
		sctx, cancel := context.WithCancel(p.ctx)
		s, err := p.conn.NewStream(p.outgoing(sctx), &keepaliveStreamDesc, keepaliveStreamMethod, noReplay)
		if err != nil {
			cancel()
			return nil, err
		}
		k.stream, k.cancel = s, cancel
	}
	stop := context.AfterFunc(ctx, k.cancel)
	defer stop()
	if err := k.stream.SendMsg(req); err != nil {
		// The stream's status rather than SendMsg's io.EOF.
		if rerr := k.stream.RecvMsg(new(transportpb.KeepaliveResponse)); rerr != nil {
			return nil, rerr
		}
		return nil, err
	}
	resp := new(transportpb.KeepaliveResponse)
	if err := k.stream.RecvMsg(resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// armIdle starts the wait after which an unused stream ends. Under k.mu.
func (k *keepaliveClient) armIdle(d time.Duration) {
	if k.stream == nil {
		return
	}
	if k.idle == nil {
		k.idle = time.AfterFunc(d, k.close)
		return
	}
	k.idle.Reset(d)
}

// brokenStream reports whether err says the stream's connection failed,
// rather than the leader refusing the request.
func brokenStream(err error) bool {
	return errors.Is(err, io.EOF) || status.Code(err) == codes.Unavailable
}

// close ends the stream, if any, unless a keepalive is on it (which re-arms
// the idle timer).
func (k *keepaliveClient) close() {
	if !k.mu.TryLock() {
		return
	}
	k.closeLocked()
	k.mu.Unlock()
}

func (k *keepaliveClient) closeLocked() {
	if k.cancel != nil {
		k.cancel()
	}
	k.stream, k.cancel = nil, nil
}
