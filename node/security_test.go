package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/certgen"
	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/transport"
)

// Secure by default (design §8): on loopback a node may run in plaintext;
// on any other address it refuses to start without TLS (and gossip without
// keys) unless told Insecure, then says so once, loudly; off loopback the
// cluster id must be the user's. Each refusal is lockerr.ErrInvalidConfig naming the
// problem.
func TestSecureByDefault(t *testing.T) {
	pki := newTestPKI(t)
	base := func(t *testing.T) Config {
		return Config{ID: 1, DataDir: t.TempDir(), ClusterID: "test", Members: []Member{{ID: 1, Addr: "127.0.0.1:1"}}}
	}
	for name, tc := range map[string]struct {
		mutate func(*Config)
		err    string // "" = starts
	}{
		"loopback plaintext":     {func(c *Config) {}, ""},
		"all interfaces, no TLS": {func(c *Config) { c.ListenAddr = "0.0.0.0:0" }, "without TLS"},
		"host address, no TLS":   {func(c *Config) { c.ListenAddr = "192.0.2.1:7400" }, "without TLS"},
		"all interfaces, insecure": {func(c *Config) {
			c.ListenAddr, c.AdvertiseAddr, c.Insecure = "0.0.0.0:0", "127.0.0.1", true
		}, ""},
		"all interfaces, TLS": {func(c *Config) {
			c.ListenAddr, c.AdvertiseAddr, c.TLS = "0.0.0.0:0", "127.0.0.1", pki.member("test", 1)
		}, ""},
		"all interfaces, no advertise address": {func(c *Config) { c.ListenAddr, c.Insecure = "0.0.0.0:0", true }, "advertise address"},
		"exposed without a cluster id":         {func(c *Config) { c.ListenAddr, c.ClusterID, c.Insecure = "0.0.0.0:0", "", true }, "explicit ClusterID"},
		"TLS cluster id not a name":            {func(c *Config) { c.ClusterID, c.TLS = "my cluster", pki.member("test", 1) }, "DNS-style"},
		"certificate of another member":        {func(c *Config) { c.TLS = pki.member("test", 2) }, "names member 0000000000000002"},
		"certificate of another cluster":       {func(c *Config) { c.TLS = pki.member("prod", 1) }, `of cluster "prod"`},
		"gossip on all interfaces, no keys": {func(c *Config) {
			c.Members, c.TLS, c.Gossip = nil, pki.member("test", 1), &GossipConfig{BindAddr: "0.0.0.0"}
		}, "refusing to gossip"},
		"session TTL over an hour": {func(c *Config) { c.SessionTTL = 2 * time.Hour }, "longer than"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := base(t)
			sink := &logSink{}
			cfg.Logger = testLoggerTo(t, 1, sink)
			tc.mutate(&cfg)
			n, err := Start(cfg)
			if tc.err != "" {
				require.ErrorIs(t, err, lockerr.ErrInvalidConfig)
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			n.Crash()
			want := 0
			if cfg.Insecure {
				want = 1
			}
			require.Equal(t, want, sink.CountLines("level=WARN", "INSECURE"), "the insecure warning, once")
		})
	}
}

// A static cluster runs on mutual TLS end to end: elections, locks,
// keepalives over the typed calls. (S1, L1.)
func TestTLSClusterLockUnlock(t *testing.T) {
	pki := newTestPKI(t)
	tc := newCluster(t, 3, pki.tune)
	leader(t, tc)
	serving(t, tc, "tls")
	for _, n := range tc.All() {
		require.Zero(t, refusals(n, "connection")+refusals(n, "rpc")+refusals(n, "raft message")+refusals(n, "call"))
	}
}

// Gossip with TLS: each member's raft id is the one its certificate names
// (Config.ID left 0), gossip is encrypted with the cluster's key, and the
// fleet forms and serves. (S1, L1.)
func TestTLSGossipFleet(t *testing.T) {
	pki := newTestPKI(t)
	ids := map[uint64]uint64{}
	f := newGossipCluster(t, "tls-gossip", 3, 3, func(c *Config) {
		id := certgen.RandomID()
		c.TLS = pki.member(c.ClusterID, id)
		c.Gossip.Keys = [][]byte{[]byte("0123456789abcdef0123456789abcdef")}
	})
	n1 := startSlot(t, f, 1) // the founders are instances 1..3
	for i := uint64(2); i <= 3; i++ {
		startSlot(t, f, i, n1.GossipAddr())
	}
	for i, n := range f.All() {
		_, id, err := tlsMemberID(n.cfg.TLS)
		require.NoError(t, err)
		require.Equal(t, id, n.ID(), "instance %d: raft id from the certificate", i)
		ids[i] = id
	}
	waitConf(t, f, 30*time.Second, "3 voters", func(v, l []uint64) bool { return len(v) == 3 })
	ctx := ctxT(t, 20*time.Second)
	for _, n := range f.All() {
		h, err := n.Acquire(ctx, "g", fmt.Sprint(n.ID()), true, 0)
		require.NoError(t, err)
		require.NoError(t, h.Release(ctx))
	}
}

// The loop's last line of defence: a panic inside it (here planted; raft's
// on input that validation missed would be the same) stops that node with
// lockerr.ErrInternal — callers get it, its handles are lost, it stops keeping its
// session alive — and does not take the process (this test binary) down;
// the rest of the cluster serves on and the lock moves on after the TTL.
// (S5, L3.)
func TestLoopPanicStopsNodeCleanly(t *testing.T) {
	logs := &logSink{}
	tc := newCluster(t, 3, withLogs(t, logs))
	lead := leader(t, tc)
	victim := follower(t, tc)
	ctx := ctxT(t, 20*time.Second)
	h, err := tc.Member(victim).Acquire(ctx, "p", "victim", true, 0)
	require.NoError(t, err)
	require.NoError(t, tc.Member(victim).do(ctx, func() { panic("planted") }))
	<-h.Context().Done()
	require.ErrorIs(t, context.Cause(h.Context()), lockerr.ErrInternal)
	_, err = tc.Member(victim).Acquire(ctx, "q", "victim", true, 0)
	require.ErrorIs(t, err, lockerr.ErrInternal)
	require.Equal(t, 1, logs.CountLines(fmt.Sprintf("n=%016x ", victim), "raft loop panicked"))
	h2, err := tc.Member(lead).Acquire(ctx, "p", "next", true, 0)
	require.NoError(t, err, "the lock moves on once the stopped node's session expires")
	require.NoError(t, h2.Release(ctx))
}

// A member's certificate is read per handshake: replacing what Certificate
// returns rotates it for new connections without a restart (WithTLSFiles
// does this from files; transport.TestTLSFilesRotation).
func TestTLSCertificateRotationWithoutRestart(t *testing.T) {
	pki := newTestPKI(t)
	cur := pki.member("test", 1)
	var current atomic.Pointer[transport.TLS]
	current.Store(cur)
	rotating := &transport.TLS{Roots: cur.Roots, Certificate: func() (*tls.Certificate, error) { return current.Load().Certificate() }}
	tc := newCluster(t, 3, func(c *Config) {
		if c.ID == 1 {
			c.TLS = rotating
		} else {
			pki.tune(c)
		}
	})
	leader(t, tc)
	serial := func() string {
		cl := pki.member("test", 2)
		cert, _ := cl.Certificate()
		pool, _ := cl.Roots()
		c, err := tls.Dial("tcp", tc.Addr(1), &tls.Config{Certificates: []tls.Certificate{*cert}, RootCAs: pool,
			InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		require.NoError(t, err)
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serial()
	certPEM, keyPEM, err := pki.ca.Member("test", 1, nil, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	current.Store(&transport.TLS{Roots: func() (*x509.CertPool, error) { return pki.ca.Pool(), nil },
		Certificate: func() (*tls.Certificate, error) { return &pair, nil }})
	require.NotEqual(t, before, serial(), "the next connection gets the new certificate")
	serving(t, tc, "rotated")
}
