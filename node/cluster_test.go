package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/cluster"
	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/internal/views"
)

func fastConfig(c *Config) {
	c.TickInterval = 20 * time.Millisecond
	c.ElectionTicks = 10
	c.HeartbeatTicks = 1
	c.SessionTTL = 2 * time.Second
	c.KeepaliveInterval = 100 * time.Millisecond
	// TryLock's default bound (2 election timeouts, 400 ms here) is shorter
	// than a loaded test machine's stalls; TestClusterThatCannotServe
	// checks the default.
	c.TryLockTimeout = 2 * time.Second
}

// newCluster starts a static cluster of size nodes in the harness
// (internal/cluster): real bbolt files in t.TempDir(), real gRPC on
// loopback, each node's faults (tc.Faults(id)) in its knobs.
func newCluster(t testing.TB, size int, tune ...func(*Config)) *cluster.Cluster[*Node] {
	t.Helper()
	return startCluster(t, cluster.Options[*Node]{Size: size}, func(s cluster.Spec) Config {
		return Config{ID: s.ID, ClusterID: "test", DataDir: s.Dir, Members: members(s.Peers), Listener: s.Listener}
	}, tune)
}

// newSimCluster is newCluster on the in-memory network (internal/simnet),
// for a test that runs inside a testing/synctest bubble: time there moves
// only when every goroutine waits, so a loaded machine cannot stretch the
// ticks against each other. The seed picks the network's delays.
func newSimCluster(t testing.TB, size int, seed uint64, tune ...func(*Config)) *cluster.Cluster[*Node] {
	t.Helper()
	t.Logf("simulated network, seed %d", seed)
	return startCluster(t, cluster.Options[*Node]{Size: size, Sim: true, Seed: seed, SimPolicy: cluster.LANPolicy},
		func(s cluster.Spec) Config {
			return Config{ID: s.ID, ClusterID: "test", DataDir: s.Dir, Members: members(s.Peers), Listener: s.Listener}
		}, tune)
}

// startCluster starts opts's members in the harness, each from the Config
// base makes of its Spec with the test defaults (fastConfig, logs to t.Log,
// the harness's knobs) and then tune applied in order: a tune may read
// c.ID, change anything, or plant bugs in the knobs (knobsOfConfig). Every
// member is crashed when the test ends.
func startCluster(t testing.TB, opts cluster.Options[*Node], base func(cluster.Spec) Config, tune []func(*Config)) *cluster.Cluster[*Node] {
	t.Helper()
	opts.Dir = t.TempDir() // removed after the members stop (cleanups run last-registered first)
	opts.Start = func(s cluster.Spec) (*Node, error) {
		cfg := base(s)
		cfg.Logger = testLogger(t, s.ID)
		cfg.knobs = s.Knobs
		fastConfig(&cfg)
		for _, f := range tune {
			f(&cfg)
		}
		n, err := Start(cfg)
		if err != nil {
			return nil, err
		}
		if s.Addr != "" {
			formationByAddr.Store(s.Addr, n.formation())
		}
		return n, nil
	}
	c, err := cluster.Start(opts)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// members are the harness's founding members as node.Members.
func members(ps []cluster.Peer) []Member {
	ms := make([]Member, len(ps))
	for i, p := range ps {
		ms[i] = Member{ID: p.ID, Addr: p.Addr}
	}
	return ms
}

// withLogs sends every node's log lines to sink too, besides t.Log.
func withLogs(t testing.TB, sink *logSink) func(*Config) {
	return func(c *Config) { c.Logger = testLoggerTo(t, c.ID, sink) }
}

// formationByAddr: the formation id of the test node at an address, so that
// an attacker (security_helpers_test.go) can carry it and reach the guards
// behind the transport's formation check (an insider knows it: every RPC
// carries it in the clear).
var formationByAddr sync.Map

// trio starts 3 nodes (tune as for newCluster) and waits for a leader; it
// returns them, a context of 30 s and each of the three.
func trio(t *testing.T, tune ...func(*Config)) (tc *cluster.Cluster[*Node], ctx context.Context, n1, n2, n3 *Node) {
	t.Helper()
	tc = newCluster(t, 3, tune...)
	leader(t, tc)
	return tc, ctxT(t, 30*time.Second), tc.Member(1), tc.Member(2), tc.Member(3)
}

// leader waits until every running node agrees on a running leader and
// returns it.
func leader(t testing.TB, tc *cluster.Cluster[*Node]) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lead, err := tc.WaitLeader(ctx)
	require.NoError(t, err)
	return lead
}

// follower waits for a leader and returns a running node that is not it.
func follower(t testing.TB, tc *cluster.Cluster[*Node]) uint64 {
	t.Helper()
	id := otherThan(tc, leader(t, tc))
	if id == 0 {
		t.Fatal("no follower")
	}
	return id
}

// otherThan is the first running node of tc that is none of not (0: none).
func otherThan(tc *cluster.Cluster[*Node], not ...uint64) uint64 {
	for id := range tc.All() {
		if !slices.Contains(not, id) {
			return id
		}
	}
	return 0
}

// configOf is the Config node id was last started with (its defaults
// filled in).
func configOf(tc *cluster.Cluster[*Node], id uint64) Config {
	n, _ := tc.Node(id)
	return n.cfg
}

func testLogger(t testing.TB, id uint64) *slog.Logger { return testLoggerTo(t, id, nil) }

// testLoggerTo logs to t.Log and, if sink is not nil, to sink.
func testLoggerTo(t testing.TB, id uint64, sink io.Writer) *slog.Logger {
	level := slog.LevelInfo
	if os.Getenv("LOCKRAFT_DEBUG") != "" {
		level = slog.LevelDebug
	}
	var w io.Writer = tWriter{t}
	if sink != nil {
		w = io.MultiWriter(w, sink)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})).With("n", views.MemberID(id))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	defer func() { recover() }() // a log line after the test ended
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// never fails t if cond holds at any poll within d. Unlike require.Never it
// polls in the calling goroutine, so no check of a member can still be
// running (and touch a closed cluster) after it returns.
func never(t *testing.T, cond func() bool, d, every time.Duration, msgAndArgs ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if cond() {
			require.Fail(t, "condition held", msgAndArgs...)
		}
		if !time.Now().Before(deadline) {
			return
		}
		time.Sleep(every)
	}
}

func TestClusterLockUnlock(t *testing.T) {
	tc := newCluster(t, 3)
	leader(t, tc)
	ctx := ctxT(t, 10*time.Second)
	var last uint64
	for id, n := range tc.All() {
		h, err := n.Acquire(ctx, "a", fmt.Sprintf("owner-%d", id), true, 0)
		require.NoError(t, err)
		require.Greater(t, h.Token(), last, "tokens strictly increase")
		last = h.Token()
		require.NoError(t, h.Release(ctx))
		require.ErrorIs(t, context.Cause(h.Context()), lockerr.ErrReleased)
		require.ErrorIs(t, h.Release(ctx), lockerr.ErrNotHeld)
	}
}
