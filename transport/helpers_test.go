package transport

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/transport/transportpb"
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
	// accept, if set, decides AcceptSnapshot; the default accepts.
	accept func(from uint64, m *raftpb.Message) error
	// receiveSnap, if set, serves ReceiveSnapshot; the default takes the file
	// as the snapshot of its index and records the MsgSnap.
	receiveSnap func(ctx context.Context, m *raftpb.Message, file string) error
	// call, if set, serves the typed calls (method: the RPC's name); the
	// default answers each with an empty response of its type.
	call func(ctx context.Context, from uint64, method string, req proto.Message) (proto.Message, error)
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

// AcceptSnapshot accepts unless accept says otherwise.
func (r *recorder) AcceptSnapshot(from uint64, m *raftpb.Message) error {
	if r.accept != nil {
		return r.accept(from, m)
	}
	return nil
}

// ReceiveSnapshot plays the node: it takes the file as the snapshot of its
// index, then records the MsgSnap like Receive.
func (r *recorder) ReceiveSnapshot(ctx context.Context, m *raftpb.Message, file string) error {
	if r.receiveSnap != nil {
		return r.receiveSnap(ctx, m, file)
	}
	dst := SnapshotPath(filepath.Dir(file), m.GetSnapshot().GetMetadata().GetIndex())
	if err := os.Rename(file, dst); err != nil {
		return err
	}
	r.Receive([]*raftpb.Message{m})
	return nil
}

func respond[Req, Resp proto.Message](r *recorder, ctx context.Context, from uint64, method string, req Req) (Resp, error) {
	var zero Resp
	if r.call == nil {
		return zero.ProtoReflect().Type().New().Interface().(Resp), nil
	}
	out, err := r.call(ctx, from, method, req)
	if err != nil {
		return zero, err
	}
	return out.(Resp), nil
}

func (r *recorder) Keepalive(ctx context.Context, from uint64, req *transportpb.KeepaliveRequest) (*transportpb.KeepaliveResponse, error) {
	return respond[*transportpb.KeepaliveRequest, *transportpb.KeepaliveResponse](r, ctx, from, "Keepalive", req)
}

func (r *recorder) Renew(ctx context.Context, from uint64, req *transportpb.RenewRequest) (*transportpb.RenewResponse, error) {
	return respond[*transportpb.RenewRequest, *transportpb.RenewResponse](r, ctx, from, "Renew", req)
}

func (r *recorder) Removed(ctx context.Context, from uint64, req *transportpb.RemovedRequest) (*transportpb.RemovedResponse, error) {
	return respond[*transportpb.RemovedRequest, *transportpb.RemovedResponse](r, ctx, from, "Removed", req)
}

func (r *recorder) Leave(ctx context.Context, from uint64, req *transportpb.LeaveRequest) (*transportpb.LeaveResponse, error) {
	return respond[*transportpb.LeaveRequest, *transportpb.LeaveResponse](r, ctx, from, "Leave", req)
}

func (r *recorder) FwdOpen(ctx context.Context, from uint64, req *transportpb.FwdOpenRequest) (*transportpb.FwdOpenResponse, error) {
	return respond[*transportpb.FwdOpenRequest, *transportpb.FwdOpenResponse](r, ctx, from, "FwdOpen", req)
}

func (r *recorder) FwdPropose(ctx context.Context, from uint64, req *transportpb.FwdProposeRequest) (*transportpb.FwdProposeResponse, error) {
	return respond[*transportpb.FwdProposeRequest, *transportpb.FwdProposeResponse](r, ctx, from, "FwdPropose", req)
}

func (r *recorder) FwdPush(ctx context.Context, from uint64, req *transportpb.FwdPushRequest) (*transportpb.FwdPushResponse, error) {
	return respond[*transportpb.FwdPushRequest, *transportpb.FwdPushResponse](r, ctx, from, "FwdPush", req)
}

func (r *recorder) FwdStatus(ctx context.Context, from uint64, req *transportpb.FwdStatusRequest) (*transportpb.FwdStatusResponse, error) {
	return respond[*transportpb.FwdStatusRequest, *transportpb.FwdStatusResponse](r, ctx, from, "FwdStatus", req)
}

func (r *recorder) Inspect(ctx context.Context, from uint64, req *transportpb.InspectRequest) (*transportpb.InspectResponse, error) {
	return respond[*transportpb.InspectRequest, *transportpb.InspectResponse](r, ctx, from, "Inspect", req)
}

func (r *recorder) Form(ctx context.Context, from uint64, req *transportpb.FormRequest) (*transportpb.FormResponse, error) {
	return respond[*transportpb.FormRequest, *transportpb.FormResponse](r, ctx, from, "Form", req)
}

func (r *recorder) VersionGate(ctx context.Context, from uint64, req *transportpb.VersionGateRequest) (*transportpb.VersionGateResponse, error) {
	return respond[*transportpb.VersionGateRequest, *transportpb.VersionGateResponse](r, ctx, from, "VersionGate", req)
}

func (r *recorder) Observe(ctx context.Context, from uint64, req *transportpb.ObserveRequest) (*transportpb.ObserveResponse, error) {
	return respond[*transportpb.ObserveRequest, *transportpb.ObserveResponse](r, ctx, from, "Observe", req)
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
