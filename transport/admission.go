package transport

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/lockraft/lockraft/internal/netrules"
	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// Admission
//
// Who may use this transport, and how much of it, is decided before any
// message of theirs is decoded, in three places:
//
//   - Accepting (admissionListener): every connection counts against
//     Config.MaxConns from the moment it is accepted, handshake included;
//     beyond it a new connection is closed at once.
//   - The handshake (tls.go, guard.go): the chain, then the identity
//     (ParseIdentity): a certificate of another cluster, an operator that is
//     no member, a certificate or member on the deny-list, or a member this
//     node revoked is refused. A member keeps at most connsPerPeer
//     connections: a newer one closes its oldest (a restarted peer's stale
//     connection goes at once).
//   - A stream's headers (admitStream, gRPC's tap, before any of its data is
//     read): who sends it (TLS: the connection's certificate, and a sender
//     header that says otherwise is refused; plaintext: the header, which
//     binds the connection to that id), the cluster id, revocation, the role
//     (raft streams and snapshots only from voters), Config.AdmitRaft, and
//     the formation id. Then the caps: per peer one raft stream and one
//     keepalive stream (a newer one ends the older), one snapshot and
//     callsPerPeer calls, and maxCalls calls in all.
//
// Then decoding is budgeted (budget.go). None of this runs per message: an
// admitted raft stream holds its peer's state, and each batch costs two
// semaphore acquisitions.
//
// Without TLS nothing backs a sender id, so every peer is PlaintextRole and
// per-peer limits apply per connection.

// rpcKind is what an RPC is, for admission.
type rpcKind uint8

const (
	kindCall rpcKind = iota + 1
	kindStream
	kindSnapshot
	kindKeepalives // a member's keepalive stream (keepalives.go)
)

// raft reports whether the kind carries raft traffic (voters only).
func (k rpcKind) raft() bool { return k == kindStream || k == kindSnapshot }

// rpcKinds maps every method this transport serves to its kind and name.
var rpcKinds = map[string]struct {
	kind rpcKind
	name string
}{
	transportpb.Raft_Stream_FullMethodName:      {kindStream, "Stream"},
	transportpb.Raft_Snapshot_FullMethodName:    {kindSnapshot, "Snapshot"},
	transportpb.Raft_Keepalive_FullMethodName:   {kindCall, "Keepalive"},
	transportpb.Raft_Renew_FullMethodName:       {kindCall, "Renew"},
	transportpb.Raft_Removed_FullMethodName:     {kindCall, "Removed"},
	transportpb.Raft_Leave_FullMethodName:       {kindCall, "Leave"},
	transportpb.Raft_FwdOpen_FullMethodName:     {kindCall, "FwdOpen"},
	transportpb.Raft_FwdPropose_FullMethodName:  {kindCall, "FwdPropose"},
	transportpb.Raft_FwdPush_FullMethodName:     {kindCall, "FwdPush"},
	transportpb.Raft_FwdStatus_FullMethodName:   {kindCall, "FwdStatus"},
	transportpb.Raft_Inspect_FullMethodName:     {kindCall, "Inspect"},
	transportpb.Raft_Form_FullMethodName:        {kindCall, "Form"},
	transportpb.Raft_VersionGate_FullMethodName: {kindCall, "VersionGate"},
	transportpb.Raft_Observe_FullMethodName:     {kindCall, "Observe"},
	keepaliveStreamMethod:                       {kindKeepalives, "Keepalive"},
}

// Peer is the authenticated sender of an incoming call: its member id and
// what its certificate lets it do (PlaintextRole without TLS).
type Peer struct {
	ID   uint64
	Role Role
}

type callerKey struct{}

// ContextWithCaller returns ctx carrying the caller of an incoming call. A
// Network passes such a ctx to its Handler's Calls (CallerOf reads it);
// the gRPC transport does so for every call.
func ContextWithCaller(ctx context.Context, p Peer) context.Context {
	return context.WithValue(ctx, callerKey{}, p)
}

// CallerOf returns the caller of the incoming call whose ctx this is: the
// member id (the Calls method's from) and the role its certificate gives
// it. A node decides per call what a role may ask; false outside a call.
func CallerOf(ctx context.Context) (Peer, bool) {
	switch v := ctx.Value(callerKey{}).(type) {
	case Peer:
		return v, true
	case *admitted:
		return Peer{ID: v.from, Role: v.role}, true
	}
	return Peer{}, false
}

// admitted is what admitStream decided about a stream; its ctx carries it
// (under callerKey, so CallerOf reads it without another allocation).
type admitted struct {
	from  uint64
	role  Role
	peer  *peerState
	adopt string // a formation id to adopt before the stream's first message
}

func admittedOf(ctx context.Context) *admitted {
	a, _ := ctx.Value(callerKey{}).(*admitted)
	return a
}

// admission is a Transport's admission state.
type admission struct {
	lim admissionLimits

	mu      sync.Mutex
	conns   map[*trackedConn]struct{} // every accepted connection
	hs      handshakes                // those of conns in their handshake (slots.go)
	peers   map[uint64]*peerState     // TLS: members with admitted connections
	revoked atomic.Pointer[map[uint64]bool]

	roles sync.Map     // member id -> Role of the last verified certificate naming it
	calls atomic.Int32 // calls in flight, all peers

	raftBudget, callBudget *semaphore.Weighted // decoding, all peers (budget.go)
}

func newAdmission(lim admissionLimits) *admission {
	a := &admission{
		lim:        lim,
		conns:      make(map[*trackedConn]struct{}),
		peers:      make(map[uint64]*peerState),
		raftBudget: semaphore.NewWeighted(lim.raftBudget),
		callBudget: semaphore.NewWeighted(lim.callBudget),
	}
	a.revoked.Store(&map[uint64]bool{})
	return a
}

func (a *admission) isRevoked(id uint64) bool { return (*a.revoked.Load())[id] }

// peerState is what admission keeps about one peer: a member (TLS), or one
// connection (plaintext).
type peerState struct {
	id    uint64
	conns []*trackedConn // admitted connections, oldest first (TLS; under admission.mu)

	mu         sync.Mutex
	raft       *context.CancelFunc // ends the current raft stream (newest wins)
	keepalives *context.CancelFunc // ends the current keepalive stream (newest wins)

	snaps    atomic.Int32
	calls    atomic.Int32
	callRead chan struct{} // reading one call's request

	raftBudget, callBudget *semaphore.Weighted // decoding (budget.go)
}

func (a *admission) newPeerState(id uint64) *peerState {
	return &peerState{
		id:         id,
		callRead:   make(chan struct{}, a.lim.callReadsPerPeer),
		raftBudget: semaphore.NewWeighted(a.lim.peerRaftBudget),
		callBudget: semaphore.NewWeighted(a.lim.peerCallBudget),
	}
}

// admissionListener counts and tracks every accepted connection.
type admissionListener struct {
	net.Listener
	t *Transport
}

func (l admissionListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		now := time.Now()
		tc := &trackedConn{Conn: c, t: l.t, source: netrules.SourceOf(c.RemoteAddr()), accepted: now}
		evicted, refused := l.t.adm.place(tc)
		if evicted != nil {
			l.t.refused.Refuse(refusedConn, hostOf(evicted.RemoteAddr()), "reason", "handshake's slot given to a newer connection",
				"handshaking", now.Sub(evicted.accepted).Round(time.Millisecond))
			_ = evicted.Close()
		}
		if refused == "" {
			return tc, nil
		}
		l.t.refused.Refuse(refusedConn, hostOf(c.RemoteAddr()), "reason", refused, "max", l.t.adm.lim.conns)
		_ = c.Close()
	}
}

// trackedConn is an accepted connection: it leaves admission when closed,
// by whoever closes it.
type trackedConn struct {
	net.Conn
	t        *Transport
	once     sync.Once
	refusals atomic.Int32 // streams refused (admitStream)
	source   string       // netrules.SourceOf its remote address
	accepted time.Time

	mu   sync.Mutex
	id   uint64            // the member it speaks for (TLS: its certificate; plaintext: its first stream)
	role Role              // what its certificate lets it do
	cert *x509.Certificate // TLS: the peer's leaf
	peer *peerState
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		a := c.t.adm
		a.mu.Lock()
		a.forgetLocked(c)
		if p := c.peer; p != nil && c.cert != nil {
			for i, o := range p.conns {
				if o == c {
					p.conns = append(p.conns[:i:i], p.conns[i+1:]...)
					break
				}
			}
			// The member's state outlives its connections: calls it
			// started may still hold its budgets, and a new connection
			// must share them (else a member that keeps reconnecting
			// would get fresh budgets each time). Revoke forgets it.
		}
		a.mu.Unlock()
	})
	return c.Conn.Close()
}

// connAuth is the AuthInfo of an admitted connection: the credentials'
// own, and the connection.
type connAuth struct {
	credentials.AuthInfo
	conn *trackedConn
}

// admitConn admits a connection whose handshake passed: with TLS it
// speaks for the member its certificate names (info's verified leaf), and
// the member's oldest connection is closed when it has connsPerPeer
// already. Without TLS it is a peer of its own until its first stream.
func (t *Transport) admitConn(raw net.Conn, info credentials.AuthInfo) (*trackedConn, error) {
	tc, ok := raw.(*trackedConn)
	if !ok {
		return nil, errors.New("transport: connection not accepted by the transport's listener")
	}
	a := t.adm
	if t.cfg.TLS == nil {
		a.mu.Lock()
		a.handshakeDoneLocked(tc)
		a.mu.Unlock()
		tc.peer = a.newPeerState(0)
		return tc, nil
	}
	ti, ok := info.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return nil, errors.New("no verified client certificate")
	}
	leaf := ti.State.PeerCertificates[0]
	ident, err := ParseIdentity(leaf) // checked in the handshake (serverTLS); read again here
	if err != nil {
		return nil, err
	}
	var evict *trackedConn
	a.mu.Lock()
	if a.isRevoked(ident.ID) { // revoked during the handshake
		a.mu.Unlock()
		return nil, fmt.Errorf("%w: member %016x was revoked", errDenied, ident.ID)
	}
	p := a.peers[ident.ID]
	if p == nil {
		p = a.newPeerState(ident.ID)
		a.peers[ident.ID] = p
	}
	if len(p.conns) >= a.lim.connsPerPeer {
		evict = p.conns[0]
	}
	p.conns = append(p.conns, tc)
	a.handshakeDoneLocked(tc)
	tc.mu.Lock()
	tc.id, tc.role, tc.cert, tc.peer = ident.ID, ident.Role, leaf, p
	tc.mu.Unlock()
	a.mu.Unlock()
	a.roles.Store(ident.ID, ident.Role)
	if evict != nil {
		t.refused.Note(refusedConn, views.MemberID(ident.ID).String(), "reason", "newer connection from the same member",
			"max", a.lim.connsPerPeer)
		_ = evict.Close()
	}
	return tc, nil
}

// maxRefusedStreams is how many of a connection's streams may be refused
// before the connection is closed: a peer that keeps opening what it may
// not must go through a handshake again for each such burst.
const maxRefusedStreams = 64

// admitStream is gRPC's tap: it runs when a stream's headers arrive,
// before any of its data is read, on the connection's reading goroutine
// (so it must not block). A refused stream is not refused here but marked
// (refusedKey), and ends with the refusal's status before any handler runs
// (refuseStreams); after maxRefusedStreams refusals the connection is
// closed.
//
// Why not refuse in the tap: gRPC (as of v1.85) does not cancel the context
// it made for a stream the tap refuses. A stream that carries a deadline
// (grpc-timeout, which the client chooses) then leaves a timer behind, and
// the timer keeps the stream's context, and with it the connection's
// transport and what it had read, until that deadline: an hour's deadline
// on each of a flood of refused streams held hundreds of MiB after the
// attacker had gone (TestAttackMemoryBounded). A stream gRPC starts is
// cancelled when it ends, however it ends.
func (t *Transport) admitStream(ctx context.Context, info *tap.Info) (context.Context, error) {
	pr, _ := grpcpeer.FromContext(ctx)
	var tc *trackedConn
	if pr != nil {
		if ca, ok := pr.AuthInfo.(connAuth); ok {
			tc = ca.conn
		}
	}
	if tc == nil {
		return context.WithValue(ctx, refusedKey{}, status.Error(codes.Unauthenticated, "connection not admitted")), nil
	}
	admitted, err := t.admit(ctx, tc, info)
	if err == nil {
		return admitted, nil
	}
	if tc.refusals.Add(1) == maxRefusedStreams {
		t.refused.Refuse(refusedConn, peerAddr(ctx), "reason", "too many refused streams; connection closed",
			"refused", maxRefusedStreams)
		go tc.Close() // not on the reading goroutine, which holds the connection's lock
	}
	return context.WithValue(ctx, refusedKey{}, err), nil
}

// refusedKey is the context key of a stream's refusal (an error with its
// gRPC status), set by admitStream.
type refusedKey struct{}

// refuseStreams is the server's stream interceptor: a stream admitStream
// refused ends with the refusal's status before its handler runs. Every
// method is a stream (raftService), so every refusal passes here; a stream
// of a method gRPC does not know ends with Unimplemented before it.
func refuseStreams(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err, ok := ss.Context().Value(refusedKey{}).(error); ok {
		return err
	}
	return handler(srv, ss)
}

// admit decides on one stream of tc; see admitStream.
func (t *Transport) admit(ctx context.Context, tc *trackedConn, info *tap.Info) (context.Context, error) {
	method, ok := rpcKinds[info.FullMethodName]
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "unknown method %q", info.FullMethodName)
	}
	rpc := method.name
	md := info.Header
	from, role, err := t.sender(ctx, tc, md, rpc)
	if err != nil {
		return nil, err
	}
	raftTraffic := method.kind.raft()
	if err := t.recv.Admit(rpc, from, role, first(md, mdCluster), raftTraffic); err != nil {
		return nil, err
	}
	adopt, err := t.form.Verdict(from, rpc, first(md, mdFormation), first(md, mdFormationDetail), raftTraffic)
	if err != nil {
		return nil, err
	}
	src := views.MemberID(from).String()
	a := t.adm
	p := tc.peer
	adm := &admitted{from: from, role: role, peer: p, adopt: adopt}
	ctx = context.WithValue(ctx, callerKey{}, adm)
	switch method.kind {
	case kindStream:
		// One raft stream per peer: a peer has one, and opens another only
		// when it gave up on the old one (which may linger here until its
		// connection is found dead); the newer one ends the older.
		ctx = newestStream(ctx, p, &p.raft)
	case kindKeepalives:
		// One keepalive stream per peer, as for raft streams: a member
		// opens another when it gave up on the old one.
		ctx = newestStream(ctx, p, &p.keepalives)
	case kindSnapshot:
		if p.snaps.Add(1) > 1 {
			p.snaps.Add(-1)
			t.refused.Refuse(refusedRPC, src, "rpc", rpc, "reason", "a snapshot from this peer is being received")
			return nil, status.Error(codes.ResourceExhausted, "a snapshot from this member is being received")
		}
		context.AfterFunc(ctx, func() { p.snaps.Add(-1) })
	case kindCall:
		if p.calls.Add(1) > a.lim.callsPerPeer {
			p.calls.Add(-1)
			t.refused.Refuse(refusedRPC, src, "rpc", rpc, "reason", "too many calls from this peer", "max", a.lim.callsPerPeer)
			return nil, status.Errorf(codes.ResourceExhausted, "more than %d calls in flight from member %016x", a.lim.callsPerPeer, from)
		}
		if a.calls.Add(1) > a.lim.calls {
			a.calls.Add(-1)
			p.calls.Add(-1)
			t.refused.Refuse(refusedRPC, src, "rpc", rpc, "reason", "too many calls in flight", "max", a.lim.calls)
			return nil, status.Errorf(codes.ResourceExhausted, "more than %d calls in flight", a.lim.calls)
		}
		context.AfterFunc(ctx, func() { p.calls.Add(-1); a.calls.Add(-1) })
	}
	t.noteVersion(from, first(md, mdVersion))
	return ctx, nil
}

// newestStream returns ctx for a stream of which p may have one at a time,
// in *slot (under p.mu): the newest ends the older.
func newestStream(ctx context.Context, p *peerState, slot **context.CancelFunc) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	p.mu.Lock()
	old := *slot
	*slot = &cancel
	p.mu.Unlock()
	if old != nil {
		(*old)()
	}
	context.AfterFunc(ctx, func() {
		p.mu.Lock()
		if *slot == &cancel {
			*slot = nil
		}
		p.mu.Unlock()
	})
	return ctx
}

// sender establishes who sent a stream. With TLS, the member its
// connection's certificate names; a "lockraft-from" header that says
// otherwise is refused, never believed. Without TLS, the header, which
// nothing backs (loopback and explicitly insecure setups only); the
// connection's first stream binds it to that id, and a stream naming
// another is refused.
func (t *Transport) sender(ctx context.Context, tc *trackedConn, md metadata.MD, rpc string) (uint64, Role, error) {
	fromStr := first(md, mdFrom)
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if t.cfg.TLS != nil {
		if tc.cert == nil {
			return 0, 0, status.Error(codes.Unauthenticated, "no verified client certificate")
		}
		if fromStr != "" && fromStr != strconv.FormatUint(tc.id, 10) {
			t.refused.Refuse(refusedRPC, views.MemberID(tc.id).String(), "rpc", rpc,
				"reason", "sender header contradicts the certificate", "header", fromStr)
			return 0, 0, status.Errorf(codes.PermissionDenied, "certificate names member %016x, header says %q", tc.id, fromStr)
		}
		return tc.id, tc.role, nil
	}
	id, err := strconv.ParseUint(fromStr, 10, 64)
	if err != nil || ReservedID(id) {
		t.refused.Refuse(refusedRPC, peerAddr(ctx), "rpc", rpc, "reason", "no valid sender id", "from", fromStr)
		return 0, 0, status.Errorf(codes.Unauthenticated, "missing or invalid %s header", mdFrom)
	}
	if tc.id == 0 {
		tc.id, tc.peer.id = id, id
	} else if tc.id != id {
		t.refused.Refuse(refusedRPC, peerAddr(ctx), "rpc", rpc, "reason", "another sender on the same connection",
			"from", views.MemberID(id), "connection_from", views.MemberID(tc.id))
		return 0, 0, status.Errorf(codes.PermissionDenied, "this connection speaks for member %016x, not %016x", tc.id, id)
	}
	return id, PlaintextRole, nil
}

// Revoke refuses member id from now on: its connections are closed, and
// every new connection or stream naming it is refused (as the deny-list's
// "member" entries do, but for this Transport's life; the node calls it
// for a member removed from the cluster, and again after a restart).
// Calls to it still work: a leader tells a removed member so (Removed).
func (t *Transport) Revoke(id uint64) {
	a := t.adm
	a.mu.Lock()
	cur := *a.revoked.Load()
	if !cur[id] {
		next := make(map[uint64]bool, len(cur)+1)
		for k := range cur {
			next[k] = true
		}
		next[id] = true
		a.revoked.Store(&next)
	}
	closing := a.connsLocked(func(c *trackedConn) bool { return c.id == id })
	delete(a.peers, id)
	a.mu.Unlock()
	for _, c := range closing {
		_ = c.Close()
	}
	if len(closing) > 0 {
		t.log.Info("transport: revoked member's connections closed", "member", views.MemberID(id), "connections", len(closing))
	}
}

// PeerRole returns the role of the last verified certificate naming member
// id, in either direction (a connection it made, or one this node made to
// it), and whether there was one. Without TLS every peer is PlaintextRole.
func (t *Transport) PeerRole(id uint64) (Role, bool) {
	if t.cfg.TLS == nil {
		return PlaintextRole, true
	}
	if r, ok := t.adm.roles.Load(id); ok {
		return r.(Role), true
	}
	return 0, false
}

// connsLocked returns the tracked connections for which match, called with
// the connection's lock held, is true. a.mu held.
func (a *admission) connsLocked(match func(c *trackedConn) bool) []*trackedConn {
	var out []*trackedConn
	for c := range a.conns {
		c.mu.Lock()
		if match(c) {
			out = append(out, c)
		}
		c.mu.Unlock()
	}
	return out
}

// closeDenied closes the connections the deny-list now refuses.
func (t *Transport) closeDenied(s *denySet) {
	a := t.adm
	a.mu.Lock()
	closing := a.connsLocked(func(c *trackedConn) bool { return c.cert != nil && s.denies(c.cert, c.id) != "" })
	a.mu.Unlock()
	for _, c := range closing {
		_ = c.Close()
	}
	if len(closing) > 0 {
		t.log.Warn("transport: connections refused by the changed deny-list closed", "connections", len(closing))
	}
}
