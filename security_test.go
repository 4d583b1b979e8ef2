package lockraft_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft"
	"github.com/lockraft/lockraft/internal/certgen"
	"github.com/lockraft/lockraft/node"
)

// Secure by default through the public options: off loopback Join refuses
// to start without TLS unless WithInsecure; WithTLSFiles with certificates
// naming the members runs a cluster (design §8).
func TestJoinSecureByDefault(t *testing.T) {
	_, err := lockraft.Join([]string{"0.0.0.0:0"}, lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr("0.0.0.0:0"),
		lockraft.WithClusterID("c1"))
	require.ErrorIs(t, err, lockraft.ErrInvalidConfig)
	require.ErrorContains(t, err, "without TLS")

	n, err := lockraft.Join([]string{"127.0.0.1:0"}, lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr("0.0.0.0:0"),
		lockraft.WithAdvertiseAddr("127.0.0.1"), lockraft.WithClusterID("c1"), lockraft.WithInsecure())
	require.NoError(t, err)
	require.NoError(t, n.Close(context.Background()))

	_, err = lockraft.Join(nil, lockraft.WithDataDir(t.TempDir()), lockraft.WithTLSFiles("/nonexistent/ca.pem", "x", "y"))
	require.ErrorIs(t, err, lockraft.ErrInvalidConfig)
}

// Three members with certificate files made like cmd/lockraft-certs does,
// joined with WithTLSFiles, serve locks. (S1, L1.)
func TestJoinWithTLSFiles(t *testing.T) {
	dir := t.TempDir()
	ca, err := certgen.NewCA("ca", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ca.pem"), ca.CertPEM, 0o600))
	peers := make([]string, 3)
	for i := range peers {
		peers[i] = freeAddr(t)
		cert, key, err := ca.Member("tls-join", uint64(i+1), nil, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "m.pem")+string(rune('1'+i)), cert, 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "k.pem")+string(rune('1'+i)), key, 0o600))
	}
	var nodes []*lockraft.Node
	for i, p := range peers {
		n, err := lockraft.Join(peers, lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr(p),
			lockraft.WithClusterID("tls-join"), fast(), lockraft.WithTLSFiles(filepath.Join(dir, "ca.pem"),
				filepath.Join(dir, "m.pem")+string(rune('1'+i)), filepath.Join(dir, "k.pem")+string(rune('1'+i))))
		require.NoError(t, err)
		t.Cleanup(func() { n.Close(context.Background()) })
		nodes = append(nodes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, n := range nodes {
		l, err := n.Lock(ctx, "tls")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	// A follower asked for an operator action asks the leader, which takes
	// them only from a certificate with the operator role; these are plain
	// voters', so the follower's answer names the leader instead.
	for _, n := range nodes {
		if lead := n.LeaderID(); lead != 0 && lead != n.ID() {
			err := n.RemoveMember(ctx, n.ID())
			require.ErrorIs(t, err, lockraft.ErrNotLeader)
			require.ErrorContains(t, err, "leader is "+lead.String())
			break
		}
	}
}

// WithDenyList reaches the transport: a malformed file fails Join, and a
// member whose list names the other two is cut off from them (they lead and
// serve without it) while its own Ready waits in vain.
func TestWithDenyList(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	require.NoError(t, os.WriteFile(bad, []byte("nonsense 7\n"), 0o600))
	addr := freeAddr(t)
	_, err := lockraft.Join([]string{addr}, lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr(addr), fast(),
		lockraft.WithDenyList(bad))
	require.ErrorIs(t, err, lockraft.ErrInvalidConfig)
	require.ErrorContains(t, err, "deny-list")

	ca, err := certgen.NewCA("ca", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	require.NoError(t, err)
	caFile, deny := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "deny")
	require.NoError(t, os.WriteFile(caFile, ca.CertPEM, 0o600))
	require.NoError(t, os.WriteFile(deny, []byte("member 2\nmember 3\n"), 0o600))
	peers := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	var nodes []*lockraft.Node
	for i, p := range peers {
		cert, key, err := ca.Member("deny", uint64(i+1), nil, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
		require.NoError(t, err)
		certFile, keyFile := filepath.Join(dir, fmt.Sprint("m", i)), filepath.Join(dir, fmt.Sprint("k", i))
		require.NoError(t, os.WriteFile(certFile, cert, 0o600))
		require.NoError(t, os.WriteFile(keyFile, key, 0o600))
		opts := []lockraft.Option{lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr(p), lockraft.WithClusterID("deny"),
			fast(), lockraft.WithTLSFiles(caFile, certFile, keyFile)}
		if i == 0 {
			opts = append(opts, lockraft.WithDenyList(deny))
		}
		n, err := lockraft.Join(peers, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { n.Close(context.Background()) })
		nodes = append(nodes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := nodes[1].Lock(ctx, "deny")
	require.NoError(t, err, "members 2 and 3 form a quorum without member 1")
	require.NoError(t, l.Unlock(ctx))
	require.NotEqual(t, nodes[0].ID(), nodes[1].LeaderID())
	short, cancel2 := context.WithTimeout(ctx, time.Second)
	defer cancel2()
	require.ErrorIs(t, nodes[0].Ready(short), lockraft.ErrUnavailable, "member 1 refuses both others: it finds no leader")
}

// The public gossip key rotation: add, use, remove; the primary cannot be
// removed; a node without gossip says so.
func TestGossipKeyRotationAPI(t *testing.T) {
	oldKey, newKey := []byte("0123456789abcdef"), []byte("fedcba9876543210")
	n, err := lockraft.Join(nil, lockraft.WithDataDir(t.TempDir()), fast(),
		lockraft.WithGossip(lockraft.Gossip{BootstrapExpect: 1, Timing: lockraft.FastGossipTiming()}),
		lockraft.WithGossipKeys(oldKey))
	require.NoError(t, err)
	t.Cleanup(func() { n.Close(context.Background()) })
	require.NoError(t, n.AddGossipKey(newKey))
	require.NoError(t, n.UseGossipKey(newKey))
	require.Error(t, n.RemoveGossipKey(newKey), "the primary key cannot be removed")
	require.NoError(t, n.RemoveGossipKey(oldKey))
	require.Error(t, n.AddGossipKey([]byte("short")))

	static, err := lockraft.Join([]string{"127.0.0.1:0"}, lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr("127.0.0.1:0"))
	require.NoError(t, err)
	t.Cleanup(func() { static.Close(context.Background()) })
	require.ErrorIs(t, static.AddGossipKey(newKey), node.ErrNoGossip)
}
