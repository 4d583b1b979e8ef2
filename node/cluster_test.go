package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/faults"
	"github.com/lockraft/lockraft/internal/lockerr"
)

// testCluster is N real nodes: real bbolt files in t.TempDir(), real gRPC on
// loopback. Logs go to t.Log so they print only when a test fails.
type testCluster struct {
	t       *testing.T
	dirs    map[uint64]string
	addrs   map[uint64]string
	members []Member
	nodes   map[uint64]*Node
	faults  map[uint64]*faults.Faults
	tune    func(*Config)
	logs    *logSink // every node's log lines, besides t.Log
}

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

func newTestCluster(t *testing.T, size int, tune ...func(*Config)) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, dirs: map[uint64]string{}, addrs: map[uint64]string{}, nodes: map[uint64]*Node{},
		faults: map[uint64]*faults.Faults{}, logs: &logSink{}}
	tc.tune = func(c *Config) {
		fastConfig(c)
		for _, f := range tune {
			f(c)
		}
	}
	lns := map[uint64]net.Listener{}
	for i := 1; i <= size; i++ {
		id := uint64(i)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		lns[id] = ln
		tc.addrs[id] = ln.Addr().String()
		tc.dirs[id] = t.TempDir()
		tc.faults[id] = &faults.Faults{}
		tc.members = append(tc.members, Member{ID: id, Addr: tc.addrs[id]})
	}
	for id := uint64(1); id <= uint64(size); id++ {
		tc.startWith(id, lns[id])
	}
	t.Cleanup(func() {
		for _, n := range tc.nodes {
			n.Crash()
		}
	})
	return tc
}

func (tc *testCluster) config(id uint64) Config {
	cfg := Config{
		ID:        id,
		DataDir:   tc.dirs[id],
		Members:   tc.members,
		Logger:    testLoggerTo(tc.t, id, tc.logs),
		ClusterID: "test",
		knobs:     tc.faults[id].Knobs(nil),
	}
	tc.tune(&cfg)
	return cfg
}

func (tc *testCluster) startWith(id uint64, ln net.Listener) {
	tc.t.Helper()
	cfg := tc.config(id)
	if ln != nil {
		cfg.Listener = ln
	} else {
		cfg.ListenAddr = tc.addrs[id]
	}
	n, err := Start(cfg)
	require.NoError(tc.t, err)
	tc.nodes[id] = n
	formationByAddr.Store(tc.addrs[id], n.formation())
}

// formationByAddr: the formation id of the test node at an address, so that
// an attacker (security_helpers_test.go) can carry it and reach the guards
// behind the transport's formation check (an insider knows it: every RPC
// carries it in the clear).
var formationByAddr sync.Map

// restart starts a stopped node again from its data directory, on its old
// address.
func (tc *testCluster) restart(id uint64) {
	tc.t.Helper()
	var ln net.Listener
	var err error
	require.Eventually(tc.t, func() bool {
		ln, err = net.Listen("tcp", tc.addrs[id])
		return err == nil
	}, 5*time.Second, 10*time.Millisecond, "rebind %s", tc.addrs[id])
	tc.startWith(id, ln)
}

// isolate cuts id off from every other node, both ways.
func (tc *testCluster) isolate(id uint64) {
	for other, f := range tc.faults {
		if other == id {
			continue
		}
		f.BlockOut(id)
		f.BlockIn(id)
		tc.faults[id].BlockOut(other)
		tc.faults[id].BlockIn(other)
	}
}

func (tc *testCluster) heal() {
	for _, f := range tc.faults {
		f.Heal()
	}
}

func (tc *testCluster) crash(id uint64) {
	tc.nodes[id].Crash()
	delete(tc.nodes, id)
}

// leader waits until all running nodes agree on one leader and returns it.
func (tc *testCluster) leader() uint64 {
	tc.t.Helper()
	var lead uint64
	require.Eventually(tc.t, func() bool {
		lead = 0
		for _, n := range tc.nodes {
			l := n.Leader()
			if l == 0 || (lead != 0 && l != lead) {
				return false
			}
			lead = l
		}
		_, running := tc.nodes[lead]
		return running
	}, 10*time.Second, 5*time.Millisecond)
	return lead
}

func (tc *testCluster) follower() uint64 {
	lead := tc.leader()
	for id := range tc.nodes {
		if id != lead {
			return id
		}
	}
	tc.t.Fatal("no follower")
	return 0
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
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})).With("n", id)
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

func TestClusterLockUnlock(t *testing.T) {
	tc := newTestCluster(t, 3)
	tc.leader()
	ctx := ctxT(t, 10*time.Second)
	var last uint64
	for id, n := range tc.nodes {
		h, err := n.Acquire(ctx, "a", fmt.Sprintf("owner-%d", id), true, 0)
		require.NoError(t, err)
		require.Greater(t, h.Token(), last, "tokens strictly increase")
		last = h.Token()
		require.NoError(t, h.Release(ctx))
		require.ErrorIs(t, context.Cause(h.Context()), lockerr.ErrReleased)
		require.ErrorIs(t, h.Release(ctx), lockerr.ErrNotHeld)
	}
}
