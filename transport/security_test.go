package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/internal/certgen"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// pki is a test CA.
type pki struct {
	t  testing.TB
	ca *certgen.CA
}

func newPKI(t testing.TB) *pki {
	ca, err := certgen.NewCA("test CA", time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	require.NoError(t, err)
	return &pki{t: t, ca: ca}
}

// member returns the TLS of member id of cluster, valid from notBefore to
// notAfter (zero: now ± a day).
func (p *pki) member(cluster string, id uint64, notAfter ...time.Time) *TLS {
	end := time.Now().Add(24 * time.Hour)
	if len(notAfter) > 0 {
		end = notAfter[0]
	}
	cert, key, err := p.ca.Member(cluster, id, nil, time.Now().Add(-48*time.Hour), end)
	require.NoError(p.t, err)
	roots, c, err := p.ca.Material(cert, key)
	require.NoError(p.t, err)
	return &TLS{Roots: roots, Certificate: c}
}

func withTLS(tl *TLS) func(*Config) { return func(c *Config) { c.TLS = tl } }

// With TLS the sender of messages and calls is the member its certificate
// names, and the pair works end to end. (S1: only members act as members.)
func TestTLSMembersAuthenticated(t *testing.T) {
	p := newPKI(t)
	a := newNode(t, "c1", 1, withTLS(p.member("c1", 1)))
	b := newNode(t, "c1", 2, withTLS(p.member("c1", 2)))
	connect(a, b)
	var from atomic.Uint64
	b.rec.Call = func(_ context.Context, f uint64, _ string, _ proto.Message) (proto.Message, error) {
		from.Store(f)
		return &transportpb.KeepaliveResponse{Status: transportpb.KeepaliveStatus_KEEPALIVE_STATUS_OK}, nil
	}
	a.t.Send([]*raftpb.Message{msgApp(1, 2, 1)})
	require.Eventually(t, func() bool { got, _ := b.rec.received(); return len(got) == 1 }, waitFor, tick)
	_, err := a.t.Keepalive(context.Background(), 2, &transportpb.KeepaliveRequest{Session: 5})
	require.NoError(t, err)
	require.Equal(t, uint64(1), from.Load())
	require.Zero(t, b.t.Refusals(refusedConn)+b.t.Refusals(refusedRPC)+b.t.Refusals(refusedMessage))
}

// Peers that must not get in: a member of another cluster (same CA), a
// certificate of another CA, an expired certificate, a plaintext client.
// Each is refused at the handshake, nothing is delivered, and however often
// it retries the refusal is logged once. (§8: "rejected, logged".)
func TestTLSRefusesWrongPeers(t *testing.T) {
	p := newPKI(t)
	other := newPKI(t)
	for name, client := range map[string]func(*Config){
		"foreign cluster": func(c *Config) { c.ClusterID, c.TLS = "c2", p.member("c2", 1) },
		"wrong CA":        withTLS(other.member("c1", 1)),
		"expired":         withTLS(p.member("c1", 1, time.Now().Add(-time.Hour))),
		"plaintext":       func(c *Config) { c.TLS = nil },
	} {
		t.Run(name, func(t *testing.T) {
			b := newNode(t, "c1", 2, withTLS(p.member("c1", 2)))
			a := newNode(t, "c1", 1, client)
			a.t.AddPeer(2, b.t.Addr())
			require.Eventually(t, func() bool {
				a.t.Send([]*raftpb.Message{msgApp(1, 2, 1)})
				_, _ = a.t.Keepalive(context.Background(), 2, &transportpb.KeepaliveRequest{})
				return b.t.Refusals(refusedConn) >= 5
			}, waitFor, 20*time.Millisecond)
			got, _ := b.rec.received()
			require.Empty(t, got)
			require.Equal(t, 1, b.log.CountLines(`msg="refused connection"`, "source=127.0.0.1"),
				"%d refusals, one log line", b.t.Refusals(refusedConn))
		})
	}
}

// A member cannot speak as another: a header naming another id is refused,
// and a raft message naming another sender is dropped, though the
// certificate is valid. A client dialling member 3 refuses a server that is
// member 2 (a misdirected or impersonated peer).
func TestTLSIdentityIsTheCertificate(t *testing.T) {
	p := newPKI(t)
	b := newNode(t, "c1", 2, withTLS(p.member("c1", 2)))
	a := newNode(t, "c1", 1, withTLS(p.member("c1", 1)))
	connect(a, b)

	// A raw client with member 1's certificate, claiming 3 in the header.
	cfg := a.t.clientTLS(2)
	conn, err := grpc.NewClient(b.t.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	require.NoError(t, err)
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), mdCluster, "c1", mdFrom, "3")
	_, err = transportpb.NewRaftClient(conn).Keepalive(ctx, &transportpb.KeepaliveRequest{})
	require.ErrorContains(t, err, "certificate names member 0000000000000001")

	// Member 1 sending raft messages as 3 over its own connection.
	a.t.Send([]*raftpb.Message{msgApp(3, 2, 1), msgApp(1, 2, 2)})
	require.Eventually(t, func() bool { got, _ := b.rec.received(); return len(got) == 1 }, waitFor, tick)
	got, _ := b.rec.received()
	require.Equal(t, uint64(1), got[0].GetFrom())
	require.EqualValues(t, 1, b.t.Refusals(refusedMessage))

	// Member 1 dialling "member 3" at member 2's address.
	a.t.AddPeer(3, b.t.Addr())
	_, err = a.t.Keepalive(context.Background(), 3, &transportpb.KeepaliveRequest{})
	require.Error(t, err)
	require.Contains(t, err.Error(), "dialled member 0000000000000003")
}

// Garbage on the gRPC port (TLS and plaintext) is refused at the handshake
// or the HTTP/2 preface, and logged once however often it comes.
func TestGarbageOnGRPCPortRefused(t *testing.T) {
	p := newPKI(t)
	for name, tl := range map[string]*TLS{"tls": p.member("c1", 2), "plaintext": nil} {
		t.Run(name, func(t *testing.T) {
			b := newNode(t, "c1", 2, withTLS(tl))
			const tries = 20
			for i := range tries {
				c, err := net.Dial("tcp", b.t.Addr())
				require.NoError(t, err)
				_, _ = fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n%d garbage garbage garbage\r\n", i)
				_ = c.(*net.TCPConn).CloseWrite()
				_, _ = c.Read(make([]byte, 64)) // until the server closes
				c.Close()
			}
			require.Eventually(t, func() bool { return b.t.Refusals(refusedConn) >= tries }, waitFor, tick)
			require.Equal(t, 1, b.log.CountLines(`msg="refused connection"`))
		})
	}
}

// An oversize message (more elements than the limit, though within gRPC's
// byte limit) is refused before it is decoded, and logged once.
func TestOversizeMessageRefused(t *testing.T) {
	b := newNode(t, "c1", 2)
	conn, err := grpc.NewClient(b.t.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), mdCluster, "c1", mdFrom, "1")
	client := transportpb.NewRaftClient(conn)
	big := &transportpb.FwdProposeRequest{Commands: make([][]byte, maxCallItems+1)}
	for range 3 {
		_, err = client.FwdPropose(ctx, big)
		require.ErrorContains(t, err, "over limit")
	}
	stream, err := client.Stream(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&transportpb.Batch{Msgs: make([][]byte, maxBatchMsgs+1)}))
	_, err = stream.CloseAndRecv()
	require.ErrorContains(t, err, "over limit")
	require.EqualValues(t, 4, b.t.Refusals(refusedOversize))
	require.Equal(t, 1, b.log.CountLines(`msg="refused oversize message"`, "FwdProposeRequest"))
	got, _ := b.rec.received()
	require.Empty(t, got)
}

// Review finding 10: 4 MiB of two-byte entries became 2,097,152 entries and
// 240 MiB in decodeMessage. Now a message announcing more entries than the
// limit is refused before anything is allocated for them, and so is a batch
// of too many messages (in the codec).
func TestDecodeAmplificationBounded(t *testing.T) {
	const size = 4 << 20
	b := make([]byte, 0, size)
	for len(b)+2 <= size {
		b = append(b, 0x3a, 0x00) // field 7 (entries), length 0
	}
	batch := make([]byte, 0, size)
	for len(batch)+2 <= size {
		batch = protowire.AppendTag(batch, 1, protowire.BytesType)
		batch = append(batch, 0x00) // an empty message
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := decodeMessage(b)
	require.ErrorIs(t, err, errLimit)
	require.ErrorIs(t, checkRepeated(batch, maxBatchMsgs), errLimit)
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("4 MiB of empty entries and a 4 MiB batch of empty messages refused with %d KiB allocated", alloc>>10)
	require.Less(t, alloc, uint64(1<<20))
}

// Snapshots: refused before any byte is written when the node does not
// admit the sender, or the announced size is over the limit; one received at
// a time; a snapshot the node could not take is a failed transfer; and
// temporary files of interrupted transfers are removed when the transport
// starts. (S3, S7: nothing but the leader's snapshot replaces the state.)
func TestSnapshotAdmission(t *testing.T) {
	t.Run("refused by the node", func(t *testing.T) {
		a, b := newNode(t, "c1", 1), newNode(t, "c1", 2)
		connect(a, b)
		b.rec.Accept = func(uint64, *raftpb.Message) error { return fmt.Errorf("%w: not the leader", ErrPermissionDenied) }
		writeSnapshotFile(t, a.dir, 9, 1<<20)
		a.t.Send([]*raftpb.Message{msgSnap(1, 2, 9)})
		require.Eventually(t, func() bool { return len(a.rec.snapshotReports()) == 1 }, waitFor, tick)
		require.Equal(t, []snapReport{{2, true}}, a.rec.snapshotReports())
		requireOnlySnapFiles(t, b.dir, 0)
		require.EqualValues(t, 1, b.t.Refusals(refusedSnapshot))
	})
	t.Run("over the size limit", func(t *testing.T) {
		a := newNode(t, "c1", 1)
		b := newNode(t, "c1", 2, func(c *Config) { c.MaxSnapshotSize = 1 << 20 })
		connect(a, b)
		writeSnapshotFile(t, a.dir, 9, 2<<20)
		a.t.Send([]*raftpb.Message{msgSnap(1, 2, 9)})
		require.Eventually(t, func() bool { return len(a.rec.snapshotReports()) == 1 }, waitFor, tick)
		require.Equal(t, []snapReport{{2, true}}, a.rec.snapshotReports())
		requireOnlySnapFiles(t, b.dir, 0)
		require.Contains(t, b.log.String(), "over the limit")
	})
	t.Run("not taken is not acknowledged", func(t *testing.T) {
		a, b := newNode(t, "c1", 1), newNode(t, "c1", 2)
		connect(a, b)
		b.rec.ReceiveSnap = func(context.Context, *raftpb.Message, string) error { return ErrClosed }
		writeSnapshotFile(t, a.dir, 9, 1<<20)
		a.t.Send([]*raftpb.Message{msgSnap(1, 2, 9)})
		require.Eventually(t, func() bool { return len(a.rec.snapshotReports()) == 1 }, waitFor, tick)
		require.Equal(t, []snapReport{{2, true}}, a.rec.snapshotReports())
		requireOnlySnapFiles(t, b.dir, 0)
	})
	t.Run("one at a time", func(t *testing.T) {
		a, c, b := newNode(t, "c1", 1), newNode(t, "c1", 3), newNode(t, "c1", 2)
		connect(a, b, c)
		release := make(chan struct{})
		first := make(chan struct{})
		b.rec.ReceiveSnap = func(_ context.Context, m *raftpb.Message, file string) error {
			close(first)
			<-release // hold the one slot until the second transfer was refused
			return os.Rename(file, SnapshotPath(filepath.Dir(file), m.GetSnapshot().GetMetadata().GetIndex()))
		}
		writeSnapshotFile(t, a.dir, 9, 1<<20)
		writeSnapshotFile(t, c.dir, 10, 1<<20)
		a.t.Send([]*raftpb.Message{msgSnap(1, 2, 9)})
		<-first
		c.t.Send([]*raftpb.Message{msgSnap(3, 2, 10)})
		require.Eventually(t, func() bool { return len(c.rec.snapshotReports()) == 1 }, waitFor, tick)
		require.Equal(t, []snapReport{{2, true}}, c.rec.snapshotReports())
		require.Contains(t, b.log.String(), "another snapshot is being received")
		close(release)
		require.Eventually(t, func() bool { return len(a.rec.snapshotReports()) == 1 }, waitFor, tick)
		require.Equal(t, []snapReport{{2, false}}, a.rec.snapshotReports())
	})
	t.Run("temporary files removed on start", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "0000000000000005.snap.tmp-123"), []byte("half"), 0o600))
		require.NoError(t, os.WriteFile(SnapshotPath(dir, 4), []byte("kept"), 0o600))
		newNode(t, "c1", 2, func(c *Config) { c.SnapshotDir = dir })
		requireOnlySnapFiles(t, dir, 1)
		_, err := os.Stat(SnapshotPath(dir, 4))
		require.NoError(t, err)
	})
}

// TLSFiles reads the files again when they change: a certificate replaced on
// disk is served to the next connection without a restart.
func TestTLSFilesRotation(t *testing.T) {
	p := newPKI(t)
	dir := t.TempDir()
	caFile, certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "m.pem"), filepath.Join(dir, "m-key.pem")
	issue := func() *x509.Certificate {
		cert, key, err := p.ca.Member("c1", 2, nil, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(caFile, p.ca.CertPEM, 0o600))
		require.NoError(t, os.WriteFile(certFile+".new", cert, 0o600))
		require.NoError(t, os.WriteFile(keyFile+".new", key, 0o600))
		require.NoError(t, os.Rename(keyFile+".new", keyFile))
		require.NoError(t, os.Rename(certFile+".new", certFile))
		pair, err := tls.X509KeyPair(cert, key)
		require.NoError(t, err)
		return pair.Leaf
	}
	first := issue()
	tl, err := TLSFiles(caFile, certFile, keyFile)
	require.NoError(t, err)
	b := newNode(t, "c1", 2, withTLS(tl))
	client := newNode(t, "c1", 1, withTLS(p.member("c1", 1)))
	served := func() *servedSerial {
		c, err := tls.Dial("tcp", b.t.Addr(), client.t.clientTLS(2))
		require.NoError(t, err)
		defer c.Close()
		return &servedSerial{c.ConnectionState().PeerCertificates[0].SerialNumber.String()}
	}
	require.Equal(t, first.SerialNumber.String(), served().s)
	second := issue()
	// Make sure the stat differs even on coarse file systems.
	later := time.Now().Add(2 * time.Second)
	require.NoError(t, os.Chtimes(certFile, later, later))
	require.Eventually(t, func() bool { return served().s == second.SerialNumber.String() }, waitFor, 50*time.Millisecond)
}

type servedSerial struct{ s string }
