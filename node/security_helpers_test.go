package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/internal/certgen"
	"github.com/lockraft/lockraft/internal/cluster"
	"github.com/lockraft/lockraft/internal/nettest"
	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// testPKI is a CA for cluster "test" and the member certificates issued so
// far, by id.
type testPKI struct {
	t  testing.TB
	ca *certgen.CA
	mu sync.Mutex
	m  map[string]*transport.TLS
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	ca, err := certgen.NewCA("lockraft test CA", time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	require.NoError(t, err)
	return &testPKI{t: t, ca: ca, m: map[string]*transport.TLS{}}
}

// member returns the TLS of member id of cluster (a certificate valid now).
func (p *testPKI) member(cluster string, id uint64) *transport.TLS {
	p.t.Helper()
	key := fmt.Sprintf("%s/%d", cluster, id)
	p.mu.Lock()
	defer p.mu.Unlock()
	if tl := p.m[key]; tl != nil {
		return tl
	}
	cert, keyPEM, err := p.ca.Member(cluster, id, nil, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	require.NoError(p.t, err)
	roots, c, err := p.ca.Material(cert, keyPEM)
	require.NoError(p.t, err)
	tl := &transport.TLS{Roots: roots, Certificate: c}
	p.m[key] = tl
	return tl
}

// tune makes a test cluster's nodes use mutual TLS with this CA.
func (p *testPKI) tune(c *Config) { c.TLS = p.member(c.ClusterID, c.ID) }

// rawTLS is a transport.TLS from certificate material that does not pass
// transport.New's own checks (a reserved id, another cluster): for a raw
// gRPC client.
func rawTLS(t testing.TB, roots *x509.CertPool, certPEM, keyPEM []byte) *tls.Config {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, InsecureSkipVerify: true,
		MinVersion: tls.VersionTLS13}
}

// nopHandler is the attacker's transport handler: it ignores what it gets.
type nopHandler struct{}

func (nopHandler) Receive([]*raftpb.Message)                    {}
func (nopHandler) AcceptSnapshot(uint64, *raftpb.Message) error { return nil }
func (nopHandler) ReportUnreachable(uint64)                     {}
func (nopHandler) ReportSnapshot(uint64, bool)                  {}
func (nopHandler) ReceiveSnapshot(context.Context, *raftpb.Message, string) error {
	return nil
}
func (nopHandler) Keepalive(context.Context, uint64, *transportpb.KeepaliveRequest) (*transportpb.KeepaliveResponse, error) {
	return &transportpb.KeepaliveResponse{}, nil
}
func (nopHandler) Renew(context.Context, uint64, *transportpb.RenewRequest) (*transportpb.RenewResponse, error) {
	return &transportpb.RenewResponse{}, nil
}
func (nopHandler) Removed(context.Context, uint64, *transportpb.RemovedRequest) (*transportpb.RemovedResponse, error) {
	return &transportpb.RemovedResponse{}, nil
}
func (nopHandler) Leave(context.Context, uint64, *transportpb.LeaveRequest) (*transportpb.LeaveResponse, error) {
	return &transportpb.LeaveResponse{}, nil
}
func (nopHandler) FwdOpen(context.Context, uint64, *transportpb.FwdOpenRequest) (*transportpb.FwdOpenResponse, error) {
	return &transportpb.FwdOpenResponse{}, nil
}
func (nopHandler) FwdPropose(context.Context, uint64, *transportpb.FwdProposeRequest) (*transportpb.FwdProposeResponse, error) {
	return &transportpb.FwdProposeResponse{}, nil
}
func (nopHandler) FwdPush(context.Context, uint64, *transportpb.FwdPushRequest) (*transportpb.FwdPushResponse, error) {
	return &transportpb.FwdPushResponse{}, nil
}
func (nopHandler) FwdStatus(context.Context, uint64, *transportpb.FwdStatusRequest) (*transportpb.FwdStatusResponse, error) {
	return &transportpb.FwdStatusResponse{}, nil
}
func (nopHandler) Form(context.Context, uint64, *transportpb.FormRequest) (*transportpb.FormResponse, error) {
	return &transportpb.FormResponse{}, nil
}
func (nopHandler) VersionGate(context.Context, uint64, *transportpb.VersionGateRequest) (*transportpb.VersionGateResponse, error) {
	return &transportpb.VersionGateResponse{}, nil
}
func (nopHandler) Observe(context.Context, uint64, *transportpb.ObserveRequest) (*transportpb.ObserveResponse, error) {
	return &transportpb.ObserveResponse{}, nil
}
func (nopHandler) Inspect(context.Context, uint64, *transportpb.InspectRequest) (*transportpb.InspectResponse, error) {
	return &transportpb.InspectResponse{}, nil
}

// attacker returns a transport of its own, speaking as member as (with tl's
// certificate; nil: plaintext) to the given peers.
func attacker(t *testing.T, cluster string, tl *transport.TLS, as uint64, peers map[uint64]string) *transport.Transport {
	t.Helper()
	var formation string
	for _, a := range peers {
		if f, ok := formationByAddr.Load(a); ok {
			formation = f.(string)
		}
	}
	tr, err := transport.New(transport.Config{ClusterID: cluster, LocalID: as, ListenAddr: "127.0.0.1:0",
		SnapshotDir: t.TempDir(), Handler: nopHandler{}, TLS: tl, Formation: formation})
	require.NoError(t, err)
	for id, a := range peers {
		tr.AddPeer(id, a)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// logSink collects every node's log lines besides t.Log, for assertions on
// what is logged (and how often).
type logSink = nettest.LogBuffer

// raftTerm is a node's raft term (loop).
func raftTerm(t *testing.T, n *Node) uint64 {
	ch := make(chan uint64, 1)
	require.NoError(t, n.do(context.Background(), func() { ch <- n.rn.BasicStatus().GetTerm() }))
	return <-ch
}

// lockState is what a node's lock table says about name: holder session,
// owner and token (zero if free).
func lockState(t *testing.T, n *Node, name string) (uint64, string, uint64) {
	type st struct {
		s   uint64
		o   string
		tok uint64
	}
	ch := make(chan st, 1)
	require.NoError(t, n.do(context.Background(), func() {
		li, ok := n.fsm.Lock(name)
		if !ok || li.HoldCount == 0 {
			ch <- st{}
			return
		}
		ch <- st{li.Holder.Session, li.Holder.Owner, li.Token}
	}))
	r := <-ch
	return r.s, r.o, r.tok
}

// appliedIndex is a node's last applied index (loop).
func appliedIndex(t *testing.T, n *Node) uint64 {
	ch := make(chan uint64, 1)
	require.NoError(t, n.do(context.Background(), func() { ch <- n.loop.lastApplied }))
	return <-ch
}

// refusals is how many inputs of kind node n refused so far.
func refusals(n *Node, kind string) uint64 { return n.tr.Refusals(kind) }

// serving checks the cluster still serves: a fresh lock on every node,
// taken and released.
func serving(t *testing.T, tc *cluster.Cluster[*Node], name string) {
	t.Helper()
	ctx := ctxT(t, 20*time.Second)
	for id, n := range tc.All() {
		require.NoError(t, n.err(), "node %d stopped", id)
		h, err := n.Acquire(ctx, name, fmt.Sprintf("probe-%d", id), true, 0)
		require.NoError(t, err, "node %d", id)
		require.NoError(t, h.Release(ctx), "node %d", id)
	}
}
