package transport

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/transport/transportpb"
)

func TestParseDenyList(t *testing.T) {
	s, err := parseDenyList([]byte(`# revoked
serial 5F:3A:9c   # openssl's colons and case
serial=ABC
member 000000000000002a
member 00000000000000FF   # case
member 7                  # decimal, as lists for earlier versions have it

member	9 # tab
`))
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"5f3a9c": true, "abc": true}, s.serials)
	require.Equal(t, map[uint64]bool{0x2a: true, 0xff: true, 7: true, 9: true}, s.members)
	for _, bad := range []string{"serial xyz", "member 0", "member -1", "member", "user 7", "serial 1 2",
		"member 0000000000000000", "member 2a", "member 0x2a", "member 07", "member 000000000000002g"} {
		_, err := parseDenyList([]byte(bad))
		require.Error(t, err, bad)
	}
}

// leafSerial returns the serial of tl's certificate as a deny-list writes it.
func leafSerial(t *testing.T, tl *TLS) string {
	c, err := tl.Certificate()
	require.NoError(t, err)
	leaf, err := leafOf(c)
	require.NoError(t, err)
	return SerialString(leaf.SerialNumber)
}

// writeDenyList replaces the deny-list file, with a modification time that
// differs from the last even on coarse file systems.
func writeDenyList(t *testing.T, path, content string, at time.Time) {
	require.NoError(t, os.WriteFile(path+".tmp", []byte(content), 0o600))
	require.NoError(t, os.Chtimes(path+".tmp", at, at))
	require.NoError(t, os.Rename(path+".tmp", path))
}

// The deny-list refuses a certificate by serial and a member by id on every
// handshake, both ways, and a change closes the connections it now
// refuses: a member on it can neither call nor stream, and this node does
// not dial it. An unusable file is a config error at start and ignored
// (the last good list stays) when it replaces a good one.
func TestDenyList(t *testing.T) {
	p := newPKI(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "deny")
	writeDenyList(t, path, "# nobody yet\n", time.Now().Add(-time.Hour))
	a := newNode(t, "c1", 1, withTLS(p.member("c1", 1)), func(c *Config) { c.DenyListFile = path })
	bTLS := p.member("c1", 2)
	b := newNode(t, "c1", 2, withTLS(bTLS))
	c := newNode(t, "c1", 3, withTLS(p.member("c1", 3)))
	connect(a, b, c)
	_, err := b.t.Keepalive(context.Background(), 1, &transportpb.KeepaliveRequest{})
	require.NoError(t, err)

	writeDenyList(t, path, fmt.Sprintf("serial %s\n", strings.ToUpper(leafSerial(t, bTLS))), time.Now().Add(-time.Minute))
	require.Eventually(t, func() bool {
		_, err := b.t.Keepalive(context.Background(), 1, &transportpb.KeepaliveRequest{})
		return err != nil
	}, waitFor, 50*time.Millisecond)
	b.t.Send([]*raftpb.Message{msgApp(2, 1, 1)})
	c.t.Send([]*raftpb.Message{msgApp(3, 1, 2)})
	require.Eventually(t, func() bool { got, _ := a.rec.received(); return len(got) == 1 }, waitFor, tick)
	got, _ := a.rec.received()
	require.Equal(t, uint64(3), got[0].GetFrom())
	_, err = a.t.Keepalive(context.Background(), 2, &transportpb.KeepaliveRequest{})
	require.Error(t, err, "a denied server is not dialled")
	require.Contains(t, a.log.String(), "certificate serial on the deny-list")

	// A file that cannot be read as a deny-list: the last good one stays.
	writeDenyList(t, path, "serial nothex\n", time.Now())
	require.Error(t, a.t.reloadDenyList())
	_, err = b.t.Keepalive(context.Background(), 1, &transportpb.KeepaliveRequest{})
	require.Error(t, err)

	// By member id, whatever certificate names it.
	writeDenyList(t, path, "member 0000000000000003\n", time.Now().Add(time.Minute))
	require.NoError(t, a.t.reloadDenyList())
	_, err = c.t.Keepalive(context.Background(), 1, &transportpb.KeepaliveRequest{})
	require.Error(t, err)
	require.Eventually(t, func() bool {
		_, err := b.t.Keepalive(context.Background(), 1, &transportpb.KeepaliveRequest{})
		return err == nil
	}, waitFor, 50*time.Millisecond)

	writeDenyList(t, path, "member zero\n", time.Now())
	_, err = New(Config{ClusterID: "c1", LocalID: 4, ListenAddr: "127.0.0.1:0", SnapshotDir: t.TempDir(),
		Handler: &recorder{}, TLS: p.member("c1", 4), DenyListFile: path})
	require.ErrorIs(t, err, ErrInvalidConfig)
}

// Revoke: the member's connections close, its new ones and its streams are
// refused; calls to it still work.
func TestRevoke(t *testing.T) {
	p := newPKI(t)
	a := newNode(t, "c1", 1, withTLS(p.member("c1", 1)))
	b := newNode(t, "c1", 2, withTLS(p.member("c1", 2)))
	connect(a, b)
	b.t.Send([]*raftpb.Message{msgApp(2, 1, 1)})
	require.Eventually(t, func() bool { got, _ := a.rec.received(); return len(got) == 1 }, waitFor, tick)

	a.t.Revoke(2)
	a.t.adm.mu.Lock()
	require.Nil(t, a.t.adm.peers[2])
	a.t.adm.mu.Unlock()
	// b keeps trying until one of its attempts reached a and was refused
	// there (at first its calls may fail on its own side, on the closed
	// connection, before it redials).
	served := 0
	require.Eventually(t, func() bool {
		b.t.Send([]*raftpb.Message{msgApp(2, 1, 2)})
		if _, err := b.t.Keepalive(context.Background(), 1, &transportpb.KeepaliveRequest{}); err == nil {
			served++
		}
		return strings.Contains(a.log.String(), "was revoked")
	}, waitFor, tick)
	require.Zero(t, served, "a revoked member's calls were served")
	got, _ := a.rec.received()
	require.Len(t, got, 1, "a revoked member's raft messages were delivered")
	_, err := a.t.Keepalive(context.Background(), 2, &transportpb.KeepaliveRequest{})
	require.NoError(t, err)
}
