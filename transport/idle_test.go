package transport

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/connectivity"

	"github.com/lockraft/lockraft/transport/transportpb"
)

// A connection that carries no call for IdleTimeout is closed, so neither
// end wakes for its keepalive pings any more (the embedding cost of issue
// 16: a light member kept a few such connections from its formation, a
// fleet's leader one per member it ever called), and the next call dials
// again and succeeds. A keepalive stream (keepalives.go) unused for
// IdleTimeout ends first.
func TestIdlePeerConnectionClosesAndRedials(t *testing.T) {
	const idle = 300 * time.Millisecond
	a := newNode(t, "c", 1, func(c *Config) { c.IdleTimeout = idle })
	b := newNode(t, "c", 2)
	connect(a, b)
	call := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := a.t.Keepalive(ctx, 2, &transportpb.KeepaliveRequest{Session: 1})
		require.NoError(t, err)
	}
	call()
	p, err := a.t.peer(2)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p.conn.GetState() == connectivity.Idle }, 10*time.Second, 10*time.Millisecond,
		"the connection should go idle %v after its last call", idle)
	call()
}

// Raft's message stream is a call in flight: a raft peer's connection is
// never closed for idleness while the stream is open, and messages sent
// long after IdleTimeout still arrive on it.
func TestRaftStreamKeepsPeerConnectionOpen(t *testing.T) {
	const idle = 200 * time.Millisecond
	a := newNode(t, "c", 1, func(c *Config) { c.IdleTimeout = idle })
	b := newNode(t, "c", 2)
	connect(a, b)
	a.t.Send([]*raftpb.Message{msgApp(1, 2, 1)})
	require.Eventually(t, func() bool { _, n := b.rec.received(); return n == 1 }, 10*time.Second, 10*time.Millisecond)
	p, err := a.t.peer(2)
	require.NoError(t, err)
	deadline := time.Now().Add(5 * idle)
	for time.Now().Before(deadline) {
		require.Equal(t, connectivity.Ready, p.conn.GetState(), "an open raft stream must keep its connection")
		time.Sleep(20 * time.Millisecond) // sampling the state, not waiting for it
	}
	a.t.Send([]*raftpb.Message{msgApp(1, 2, 2)})
	require.Eventually(t, func() bool { _, n := b.rec.received(); return n == 2 }, 10*time.Second, 10*time.Millisecond)
}
