package transport

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

const (
	waitFor = 10 * time.Second
	tick    = 5 * time.Millisecond
)

// recorder is a Handler that records everything it is told.
type recorder struct {
	mu          sync.Mutex
	batches     [][]*raftpb.Message
	unreachable map[uint64]int
	snapReports []snapReport

	// onReceive, if set, runs inside Receive before recording.
	onReceive func(msgs []*raftpb.Message)
	// call, if set, serves HandleCall; the default echoes.
	call func(ctx context.Context, from uint64, method string, req []byte) ([]byte, error)
}

type snapReport struct {
	id     uint64
	failed bool
}

func (r *recorder) Receive(msgs []*raftpb.Message) {
	if r.onReceive != nil {
		r.onReceive(msgs)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, msgs)
}

func (r *recorder) ReportUnreachable(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unreachable == nil {
		r.unreachable = make(map[uint64]int)
	}
	r.unreachable[id]++
}

func (r *recorder) ReportSnapshot(id uint64, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snapReports = append(r.snapReports, snapReport{id, failed})
}

func (r *recorder) HandleCall(ctx context.Context, from uint64, method string, req []byte) ([]byte, error) {
	if r.call != nil {
		return r.call(ctx, from, method, req)
	}
	return append([]byte(method+":"), req...), nil
}

// received returns all messages received so far, flattened, and the number
// of Receive calls.
func (r *recorder) received() ([]*raftpb.Message, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []*raftpb.Message
	for _, b := range r.batches {
		all = append(all, b...)
	}
	return all, len(r.batches)
}

func (r *recorder) unreachableCount(id uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unreachable[id]
}

func (r *recorder) snapshotReports() []snapReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]snapReport(nil), r.snapReports...)
}

// logBuffer is a goroutine-safe slog sink whose contents tests can assert.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// node is one transport under test.
type node struct {
	t   *Transport
	rec *recorder
	log *logBuffer
	dir string
}

// newNode starts a transport on loopback; mutate adjusts the config.
func newNode(tb testing.TB, cluster string, id uint64, mutate ...func(*Config)) *node {
	tb.Helper()
	n := &node{rec: &recorder{}, log: &logBuffer{}, dir: tb.TempDir()}
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
