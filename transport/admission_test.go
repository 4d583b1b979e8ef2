package transport

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/transport/transportpb"
)

// memberRole returns the TLS of member id of cluster with role ("voter",
// "light", "light,operator"...).
func (p *pki) memberRole(cluster string, id uint64, role string) *TLS {
	cert, key, err := p.ca.MemberRole(cluster, id, role, nil, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	require.NoError(p.t, err)
	roots, c, err := p.ca.Material(cert, key)
	require.NoError(p.t, err)
	return &TLS{Roots: roots, Certificate: c}
}

// rawClient is a gRPC client of addr that is no Transport: it presents tl's
// certificate (nil: plaintext) and sends the headers of member from of
// cluster, so that tests can open streams and calls at will.
type rawClient struct {
	conn *grpc.ClientConn
	rpc  transportpb.RaftClient
	ctx  context.Context
}

func dialRaw(t testing.TB, addr string, tl *TLS, cluster string, from uint64, opts ...grpc.DialOption) *rawClient {
	t.Helper()
	creds := insecure.NewCredentials()
	if tl != nil {
		creds = credentials.NewTLS(&tls.Config{
			MinVersion:           tls.VersionTLS13,
			InsecureSkipVerify:   true, // the test trusts its server
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return tl.Certificate() },
		})
	}
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ctx := metadata.AppendToOutgoingContext(context.Background(), mdCluster, cluster,
		mdFrom, strconv.FormatUint(from, 10))
	return &rawClient{conn: conn, rpc: transportpb.NewRaftClient(conn), ctx: ctx}
}

// batchOf marshals msgs into one Batch.
func batchOf(t testing.TB, msgs ...*raftpb.Message) *transportpb.Batch {
	b := &transportpb.Batch{}
	for _, m := range msgs {
		raw, err := proto.Marshal(m)
		require.NoError(t, err)
		b.Msgs = append(b.Msgs, raw)
	}
	return b
}

// callerSeen makes n's calls record the caller CallerOf names.
func callerSeen(n *node) func() []Peer {
	var mu sync.Mutex
	var seen []Peer
	n.rec.Call = func(ctx context.Context, _ uint64, _ string, _ proto.Message) (proto.Message, error) {
		p, _ := CallerOf(ctx)
		mu.Lock()
		seen = append(seen, p)
		mu.Unlock()
		return &transportpb.KeepaliveResponse{}, nil
	}
	return func() []Peer {
		mu.Lock()
		defer mu.Unlock()
		return append([]Peer(nil), seen...)
	}
}

// Raft traffic only from voters: a light member's stream and snapshot are
// refused when their headers arrive (nothing of them is decoded), while its
// calls are served with its role in their ctx. PeerRole knows both sides'
// roles from their certificates.
func TestRaftTrafficOnlyFromVoters(t *testing.T) {
	p := newPKI(t)
	a := newNode(t, "c1", 1, withTLS(p.memberRole("c1", 1, "voter")))
	light := newNode(t, "c1", 2, withTLS(p.memberRole("c1", 2, "light,operator")))
	voter := newNode(t, "c1", 3, withTLS(p.memberRole("c1", 3, "voter")))
	connect(a, light, voter)
	seen := callerSeen(a)

	writeSnapshotFile(t, light.dir, 9, 1<<10)
	light.t.Send([]*raftpb.Message{msgApp(2, 1, 1), msgSnap(2, 1, 9)})
	voter.t.Send([]*raftpb.Message{msgApp(3, 1, 2)})
	require.Eventually(t, func() bool { got, _ := a.rec.received(); return len(got) == 1 }, waitFor, tick)
	require.Eventually(t, func() bool { return len(light.rec.snapshotReports()) == 1 }, waitFor, tick)
	require.Equal(t, []snapReport{{1, true}}, light.rec.snapshotReports())
	_, err := light.t.Keepalive(context.Background(), 1, &transportpb.KeepaliveRequest{})
	require.NoError(t, err)
	_, err = voter.t.Keepalive(context.Background(), 1, &transportpb.KeepaliveRequest{})
	require.NoError(t, err)

	got, _ := a.rec.received()
	require.Equal(t, uint64(3), got[0].GetFrom())
	require.GreaterOrEqual(t, a.t.Refusals(refusedRPC), uint64(2))
	require.Contains(t, a.log.String(), "no voter role")
	require.ElementsMatch(t, []Peer{{2, RoleLight | RoleOperator}, {3, RoleVoter}}, seen())
	for id, want := range map[uint64]Role{2: RoleLight | RoleOperator, 3: RoleVoter} {
		r, ok := a.t.PeerRole(id)
		require.True(t, ok)
		require.Equal(t, want, r)
	}
	r, ok := light.t.PeerRole(1) // learnt from the server's certificate
	require.True(t, ok)
	require.Equal(t, RoleVoter, r)
	_, ok = a.t.PeerRole(9)
	require.False(t, ok)
	ident, err := light.t.cfg.TLS.identity()
	require.NoError(t, err)
	require.Equal(t, Identity{Cluster: "c1", ID: 2, Role: RoleLight | RoleOperator}, ident)
}

// Config.AdmitRaft refuses a voter's raft traffic (the node: a voter that
// is no member) before any of it is read; without TLS every peer is a
// voter and an operator.
func TestAdmitRaftAndPlaintextRoles(t *testing.T) {
	a := newNode(t, "c1", 1, func(c *Config) { c.AdmitRaft = func(from uint64) bool { return from != 3 } })
	b, c := newNode(t, "c1", 2), newNode(t, "c1", 3)
	connect(a, b, c)
	seen := callerSeen(a)
	c.t.Send([]*raftpb.Message{msgApp(3, 1, 1)})
	b.t.Send([]*raftpb.Message{msgApp(2, 1, 2)})
	require.Eventually(t, func() bool { got, _ := a.rec.received(); return len(got) == 1 }, waitFor, tick)
	require.Eventually(t, func() bool { return a.t.Refusals(refusedRPC) >= 1 }, waitFor, tick)
	got, _ := a.rec.received()
	require.Equal(t, uint64(2), got[0].GetFrom())
	_, err := c.t.Keepalive(context.Background(), 1, &transportpb.KeepaliveRequest{})
	require.NoError(t, err)
	require.Equal(t, []Peer{{3, PlaintextRole}}, seen())
	r, ok := a.t.PeerRole(77)
	require.True(t, ok)
	require.Equal(t, PlaintextRole, r)
}

// An operator certificate that is no member never gets past the handshake
// of the peer port.
func TestOperatorIdentityRefusedOnPeerPort(t *testing.T) {
	p := newPKI(t)
	a := newNode(t, "c1", 1, withTLS(p.member("c1", 1)))
	cert, key, err := p.ca.Operator("c1", "alice", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	require.NoError(t, err)
	roots, c, err := p.ca.Material(cert, key)
	require.NoError(t, err)
	op := dialRaw(t, a.t.Addr(), &TLS{Roots: roots, Certificate: c}, "c1", 0)
	_, err = op.rpc.Keepalive(op.ctx, &transportpb.KeepaliveRequest{})
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	// The refusal is counted, then logged: await both.
	require.Eventually(t, func() bool {
		return a.t.Refusals(refusedConn) >= 1 && strings.Contains(a.log.String(), "is no member")
	}, waitFor, tick, "refusals %d, log %q", a.t.Refusals(refusedConn), a.log.String())
}

// A member keeps at most connsPerPeer connections: a newer one closes its
// oldest. The listener accepts at most MaxConns connections at once,
// handshakes included.
func TestConnectionCaps(t *testing.T) {
	p := newPKI(t)
	a := newNode(t, "c1", 1, withTLS(p.member("c1", 1)))
	tl := p.memberRole("c1", 2, "light")
	var clients []*rawClient
	for range 4 {
		c := dialRaw(t, a.t.Addr(), tl, "c1", 2)
		_, err := c.rpc.Keepalive(c.ctx, &transportpb.KeepaliveRequest{})
		require.NoError(t, err)
		clients = append(clients, c)
	}
	a.t.adm.mu.Lock()
	conns := len(a.t.adm.peers[2].conns)
	a.t.adm.mu.Unlock()
	require.Equal(t, 2, conns)
	// The first two were closed by the later ones.
	require.EqualValues(t, 2, a.t.Refusals(refusedConn))
	require.Contains(t, a.log.String(), "newer connection from the same member")

	b := newNode(t, "c1", 3, func(c *Config) {
		c.limits = &admissionLimits{conns: 3, connsPerPeer: 2, calls: 10,
			callsPerPeer: 10, callReadsPerPeer: 1, peerRaftBudget: 1 << 20, raftBudget: 1 << 20, peerCallBudget: 1 << 20, callBudget: 1 << 20}
	})
	var raw []net.Conn
	for range 5 {
		c, err := net.Dial("tcp", b.t.Addr())
		require.NoError(t, err)
		raw = append(raw, c)
	}
	require.Eventually(t, func() bool { return b.t.Refusals(refusedConn) >= 2 }, waitFor, tick)
	b.t.adm.mu.Lock()
	require.Len(t, b.t.adm.conns, 3)
	b.t.adm.mu.Unlock()
	for _, c := range raw {
		c.Close()
	}
	require.Eventually(t, func() bool { b.t.adm.mu.Lock(); defer b.t.adm.mu.Unlock(); return len(b.t.adm.conns) == 0 }, waitFor, tick)
	require.Contains(t, b.log.String(), "too many connections")
}

// Per peer: one raft stream (a newer one ends the older), one snapshot at
// a time, callsPerPeer calls in flight.
func TestStreamCaps(t *testing.T) {
	lim := defaultLimits(defaultMaxConns)
	lim.callsPerPeer = 2
	a := newNode(t, "c1", 1, func(c *Config) { c.limits = &lim })
	c := dialRaw(t, a.t.Addr(), nil, "c1", 2)

	s1, err := c.rpc.Stream(c.ctx)
	require.NoError(t, err)
	require.NoError(t, s1.Send(batchOf(t, msgApp(2, 1, 1))))
	require.Eventually(t, func() bool { got, _ := a.rec.received(); return len(got) == 1 }, waitFor, tick)
	s2, err := c.rpc.Stream(c.ctx)
	require.NoError(t, err)
	require.NoError(t, s2.Send(batchOf(t, msgApp(2, 1, 2))))
	require.Eventually(t, func() bool { got, _ := a.rec.received(); return len(got) == 2 }, waitFor, tick)
	_, err = s1.CloseAndRecv()
	require.Equal(t, codes.Canceled, status.Code(err), "%v", err)
	_, err = s2.CloseAndRecv()
	require.NoError(t, err)

	sn1, err := c.rpc.Snapshot(c.ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.t.adm.peersSnapshots() == 1 }, waitFor, tick)
	sn2, err := c.rpc.Snapshot(c.ctx)
	require.NoError(t, err)
	_, err = sn2.CloseAndRecv()
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	require.NoError(t, sn1.CloseSend())

	release := releaser(t)
	a.rec.Call = func(context.Context, uint64, string, proto.Message) (proto.Message, error) {
		release.hold()
		return &transportpb.KeepaliveResponse{}, nil
	}
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := c.rpc.Keepalive(c.ctx, &transportpb.KeepaliveRequest{})
			errs <- err
		}()
	}
	select {
	case err = <-errs:
	case <-time.After(waitFor):
		t.Fatal("a third call was admitted beside two in flight")
	}
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	require.Eventually(t, func() bool { return release.inside.Load() == 2 }, waitFor, tick)
	release.Close()
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
}

// gate holds handlers until Close (which a test's cleanup also does, before
// the transport's: a failed test does not leave them blocked).
type gate struct {
	C      chan struct{}
	once   sync.Once
	inside atomic.Int32 // handlers that reached hold
}

func (g *gate) Close() { g.once.Do(func() { close(g.C) }) }

// hold counts a handler inside and holds it until Close.
func (g *gate) hold() {
	g.inside.Add(1)
	<-g.C
}

// releaser returns a gate closed at the latest when t ends (register it
// after the nodes, so that it is closed before they are).
func releaser(t *testing.T) *gate {
	g := &gate{C: make(chan struct{})}
	t.Cleanup(g.Close)
	return g
}

// peersSnapshots counts the snapshot streams admitted (tests).
func (a *admission) peersSnapshots() int {
	n := 0
	a.mu.Lock()
	defer a.mu.Unlock()
	for c := range a.conns {
		if c.peer != nil {
			n += int(c.peer.snaps.Load())
		}
	}
	return n
}

// A call's request is charged to its peer's budget before it is decoded
// and until its handler returns: a peer whose held requests fill its
// budget waits (and sends no more) until one returns.
func TestCallRequestsBudgeted(t *testing.T) {
	lim := defaultLimits(defaultMaxConns)
	lim.peerCallBudget = 1 << 20
	a := newNode(t, "c1", 1, func(c *Config) { c.limits = &lim })
	c := dialRaw(t, a.t.Addr(), nil, "c1", 2)
	release := releaser(t)
	a.rec.Call = func(context.Context, uint64, string, proto.Message) (proto.Message, error) {
		release.hold()
		return &transportpb.FwdProposeResponse{}, nil
	}
	req := &transportpb.FwdProposeRequest{Commands: [][]byte{make([]byte, 700<<10)}}
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := c.rpc.FwdPropose(c.ctx, req)
			errs <- err
		}()
	}
	require.Eventually(t, func() bool { return release.inside.Load() == 1 }, waitFor, tick)
	time.Sleep(200 * time.Millisecond) // the second would be inside by now if it were not held back
	require.EqualValues(t, 1, release.inside.Load(), "two requests of 700 KiB held within a budget of 1 MiB")
	release.Close()
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	require.EqualValues(t, 2, release.inside.Load())
}

// A raft batch is charged its decoding cost before it is decoded and until
// Receive returns: with the total budget room for one, a second peer's
// batch is not decoded while the first is being delivered.
func TestRaftBatchesBudgeted(t *testing.T) {
	lim := defaultLimits(defaultMaxConns)
	lim.raftBudget = 300 << 10
	a := newNode(t, "c1", 1, func(c *Config) { c.limits = &lim })
	release := releaser(t)
	a.rec.OnReceive = func([]*raftpb.Message) { release.hold() }
	big := msgApp(2, 1, 1)
	big.Entries = []*raftpb.Entry{{Term: new(uint64(1)), Index: new(uint64(1)), Data: make([]byte, 200<<10)}}
	for from := uint64(2); from <= 3; from++ {
		c := dialRaw(t, a.t.Addr(), nil, "c1", from)
		s, err := c.rpc.Stream(c.ctx)
		require.NoError(t, err)
		m := proto.Clone(big).(*raftpb.Message)
		m.From = new(from)
		require.NoError(t, s.Send(batchOf(t, m)))
	}
	require.Eventually(t, func() bool { return release.inside.Load() == 1 }, waitFor, tick)
	time.Sleep(200 * time.Millisecond) // the second would be inside by now if it were not held back
	require.EqualValues(t, 1, release.inside.Load(), "two batches of 200 KiB delivered within a budget of 300 KiB")
	release.Close()
	require.Eventually(t, func() bool { got, _ := a.rec.received(); return len(got) == 2 }, waitFor, tick)
}

// A batch announcing more than its bytes may decode to (limits.go) is
// refused whole before anything of it is decoded, and ends its stream.
func TestAmplifiedBatchRefused(t *testing.T) {
	a := newNode(t, "c1", 1)
	c := dialRaw(t, a.t.Addr(), nil, "c1", 2)
	empty := make([]byte, 0, 64<<10)
	for len(empty)+2 <= 64<<10 {
		empty = append(empty, 0x3a, 0x00) // an empty entry
	}
	s, err := c.rpc.Stream(c.ctx)
	require.NoError(t, err)
	require.NoError(t, s.Send(&transportpb.Batch{Msgs: [][]byte{empty, empty, empty, empty}}))
	_, err = s.CloseAndRecv()
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.EqualValues(t, 1, a.t.Refusals(refusedMessage))
	got, _ := a.rec.received()
	require.Empty(t, got)
}
