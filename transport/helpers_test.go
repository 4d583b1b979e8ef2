package transport

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/internal/nettest"
)

const (
	waitFor = 10 * time.Second
	tick    = 5 * time.Millisecond
)

// recorder is nettest.Recorder with the views these tests read.
type recorder struct{ nettest.Recorder }

// snapReport is one ReportSnapshot call, without its time.
type snapReport struct {
	id     uint64
	failed bool
}

// received returns all messages received so far, flattened, and the number
// of Receive calls.
func (r *recorder) received() ([]*raftpb.Message, int) {
	batches := r.Batches()
	var all []*raftpb.Message
	for _, b := range batches {
		all = append(all, b.Msgs...)
	}
	return all, len(batches)
}

func (r *recorder) snapshotReports() []snapReport {
	var out []snapReport
	for _, rep := range r.SnapReports() {
		out = append(out, snapReport{rep.ID, rep.Failed})
	}
	return out
}

// node is one transport under test.
type node struct {
	t   *Transport
	rec *recorder
	log *nettest.LogBuffer
	dir string
}

// newNode starts a transport on loopback; mutate adjusts the config.
func newNode(tb testing.TB, cluster string, id uint64, mutate ...func(*Config)) *node {
	tb.Helper()
	n := &node{rec: &recorder{}, log: &nettest.LogBuffer{}, dir: tb.TempDir()}
	cfg := Config{
		ClusterID:   cluster,
		LocalID:     id,
		ListenAddr:  "127.0.0.1:0",
		SnapshotDir: n.dir,
		Handler:     n.rec,
		Logger:      slog.New(slog.NewTextHandler(n.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, f := range mutate {
		f(&cfg)
	}
	tr, err := New(cfg)
	require.NoError(tb, err)
	n.t = tr
	tb.Cleanup(func() { _ = tr.Close() })
	return n
}

// connect makes every node a peer of every other.
func connect(nodes ...*node) {
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				a.t.AddPeer(b.t.cfg.LocalID, b.t.Addr())
			}
		}
	}
}

func msgApp(from, to, index uint64) *raftpb.Message {
	return &raftpb.Message{
		Type:  raftpb.MessageType_MsgApp.Enum(),
		From:  new(from),
		To:    new(to),
		Term:  new(uint64(1)),
		Index: new(index),
	}
}

// indexes returns the Index of every message, in order.
func indexes(msgs []*raftpb.Message) []uint64 {
	out := make([]uint64, len(msgs))
	for i, m := range msgs {
		out[i] = m.GetIndex()
	}
	return out
}

func seq(from, to uint64) []uint64 {
	var out []uint64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// connsOf counts the accepted connections that speak for member id.
func (t *Transport) connsOf(id uint64) int {
	a := t.adm
	a.mu.Lock()
	conns := make([]*trackedConn, 0, len(a.conns))
	for c := range a.conns {
		conns = append(conns, c)
	}
	a.mu.Unlock()
	n := 0
	for _, c := range conns {
		c.mu.Lock()
		if c.id == id {
			n++
		}
		c.mu.Unlock()
	}
	return n
}
