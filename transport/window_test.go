package transport

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

// tickFast polls for a message that is already on its way.
const tickFast = 200 * time.Microsecond

// writeCountingListener counts the Write calls on every connection it
// accepts: the server side's frames to the client (settings, window
// updates, pings, stream replies).
type writeCountingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *writeCountingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &writeCountingConn{Conn: c, writes: &l.writes}, nil
}

type writeCountingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *writeCountingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestStreamReceiverDoesNotPing: a peer streams 300 small batches, each sent
// only after the one before arrived (as a raft leader's appends under light
// load are). The receiving side only reads the stream, so apart from the
// connection's setup and an occasional window update it writes nothing.
// With gRPC's default dynamic windows its bandwidth estimator sent a PING
// for nearly every batch received (and the sender a PING ack): one extra
// write syscall per message each way.
func TestStreamReceiverDoesNotPing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	counting := &writeCountingListener{Listener: ln}
	a := newNode(t, "c1", 1)
	b := newNode(t, "c1", 2, func(c *Config) { c.Listener = counting })
	connect(a, b)

	send := func(from, to uint64) {
		for i := from; i <= to; i++ {
			a.t.Send([]*raftpb.Message{msgApp(1, 2, i)})
			require.Eventually(t, func() bool { got, _ := b.rec.received(); return uint64(len(got)) >= i }, waitFor, tickFast)
		}
	}
	send(1, 20) // the stream is open and warm
	before := counting.writes.Load()
	send(21, 320)
	writes := counting.writes.Load() - before
	t.Logf("receiver wrote %d times while 300 batches arrived", writes)
	require.Less(t, writes, int64(30), "the receiver answers received batches (PINGs?)")
	got, _ := b.rec.received()
	require.Equal(t, seq(1, 320), indexes(got))
}
