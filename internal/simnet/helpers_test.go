package simnet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// recorder is a Handler that records what it is told, with the time.
type recorder struct {
	id uint64

	mu          sync.Mutex
	batches     []batch
	unreachable []uint64
	snapReports []snapReport
	calls       []callRecord

	// onReceive, if set, sees every batch after it is recorded.
	onReceive func(msgs []*raftpb.Message)
	// accept decides AcceptSnapshot (nil accepts).
	accept func(from uint64, m *raftpb.Message) error
	// receiveSnap serves ReceiveSnapshot (nil renames the file to its
	// SnapshotPath and records the MsgSnap as a batch).
	receiveSnap func(ctx context.Context, m *raftpb.Message, file string) error
	// call serves the typed calls (nil answers an empty response).
	call func(ctx context.Context, from uint64, method string, req proto.Message) (proto.Message, error)
}

type batch struct {
	at   time.Time
	msgs []*raftpb.Message
}

type snapReport struct {
	id     uint64
	failed bool
	at     time.Time
}

type callRecord struct {
	from   uint64
	method string
	req    proto.Message
}

func (r *recorder) Receive(msgs []*raftpb.Message) {
	r.mu.Lock()
	r.batches = append(r.batches, batch{at: time.Now(), msgs: msgs})
	f := r.onReceive
	r.mu.Unlock()
	if f != nil {
		f(msgs)
	}
}

// counter returns an onReceive that closes the returned channel once want
// messages have been received.
func counter(want int) (func([]*raftpb.Message), <-chan struct{}) {
	var (
		mu   sync.Mutex
		got  int
		done = make(chan struct{})
	)
	return func(msgs []*raftpb.Message) {
		mu.Lock()
		defer mu.Unlock()
		if got < want && got+len(msgs) >= want {
			close(done)
		}
		got += len(msgs)
	}, done
}

func (r *recorder) AcceptSnapshot(from uint64, m *raftpb.Message) error {
	if r.accept != nil {
		return r.accept(from, m)
	}
	return nil
}

func (r *recorder) ReceiveSnapshot(ctx context.Context, m *raftpb.Message, file string) error {
	if r.receiveSnap != nil {
		return r.receiveSnap(ctx, m, file)
	}
	return r.takeSnapshot(m, file)
}

// takeSnapshot is what ReceiveSnapshot does by default: rename the file to
// the snapshot of its index and record the MsgSnap as a batch.
func (r *recorder) takeSnapshot(m *raftpb.Message, file string) error {
	dst := transport.SnapshotPath(filepath.Dir(file), m.GetSnapshot().GetMetadata().GetIndex())
	if err := os.Rename(file, dst); err != nil {
		return err
	}
	r.Receive([]*raftpb.Message{m})
	return nil
}

func (r *recorder) ReportUnreachable(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unreachable = append(r.unreachable, id)
}

func (r *recorder) ReportSnapshot(id uint64, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snapReports = append(r.snapReports, snapReport{id: id, failed: failed, at: time.Now()})
}

// batchList returns the batches received, in order.
func (r *recorder) batchList() []batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// received returns every message received, in order.
func (r *recorder) received() []*raftpb.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*raftpb.Message
	for _, b := range r.batches {
		out = append(out, b.msgs...)
	}
	return out
}

// receivedFrom returns the indexes of the messages received from from.
func (r *recorder) receivedFrom(from uint64) []uint64 {
	var out []uint64
	for _, m := range r.received() {
		if m.GetFrom() == from {
			out = append(out, m.GetIndex())
		}
	}
	return out
}

func (r *recorder) unreachableCount(id uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := 0
	for _, u := range r.unreachable {
		if u == id {
			c++
		}
	}
	return c
}

func (r *recorder) reports() []snapReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.snapReports)
}

func respond[Req, Resp proto.Message](r *recorder, ctx context.Context, from uint64, method string, req Req) (Resp, error) {
	r.mu.Lock()
	r.calls = append(r.calls, callRecord{from: from, method: method, req: req})
	f := r.call
	r.mu.Unlock()
	var zero Resp
	if f == nil {
		return zero.ProtoReflect().Type().New().Interface().(Resp), nil
	}
	out, err := f(ctx, from, method, req)
	if err != nil || out == nil {
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

// node is one started endpoint with its recorder.
type node struct {
	ep  *Endpoint
	rec *recorder
	dir string
}

const testCluster = "sim-cluster"

// config is the Config of node id in the test cluster.
func config(t testing.TB, id uint64, rec *recorder) transport.Config {
	return transport.Config{
		ClusterID:   testCluster,
		LocalID:     id,
		SnapshotDir: filepath.Join(t.TempDir(), fmt.Sprint(id)),
		Handler:     rec,
		Version:     fmt.Sprintf("v%d", id),
	}
}

// start starts id's endpoint with cfg adjusted by adjust (may be nil).
func start(t testing.TB, n *Network, id uint64, adjust func(*transport.Config)) *node {
	t.Helper()
	rec := &recorder{id: id}
	cfg := config(t, id, rec)
	if adjust != nil {
		adjust(&cfg)
	}
	tn, err := n.Start(cfg)
	if err != nil {
		t.Fatalf("start %d: %v", id, err)
	}
	return &node{ep: tn.(*Endpoint), rec: rec, dir: cfg.SnapshotDir}
}

// cluster starts endpoints 1..size, each a peer of every other.
func cluster(t testing.TB, n *Network, size int) map[uint64]*node {
	t.Helper()
	nodes := make(map[uint64]*node)
	for id := uint64(1); id <= uint64(size); id++ {
		nodes[id] = start(t, n, id, nil)
	}
	connect(nodes)
	return nodes
}

func connect(nodes map[uint64]*node) {
	for _, a := range nodes {
		for id := range nodes {
			a.ep.AddPeer(id, Addr(id))
		}
	}
}

// app is a MsgApp from→to carrying index, which the tests use to tell
// messages apart.
func app(from, to, index uint64) *raftpb.Message {
	t := raftpb.MessageType_MsgApp
	return &raftpb.Message{Type: &t, From: &from, To: &to, Term: proto.Uint64(1), Index: &index,
		Entries: []*raftpb.Entry{{Data: []byte(fmt.Sprintf("entry %d", index))}}}
}

func msg(typ raftpb.MessageType, from, to uint64) *raftpb.Message {
	return &raftpb.Message{Type: &typ, From: &from, To: &to, Term: proto.Uint64(1)}
}

// seq returns 1..n.
func seq(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}
