// Package nettest holds what the tests of lockraft's networks share: a
// transport.Handler that records what it is told, and a log sink tests can
// read. transport's own tests use it, so it imports nothing of lockraft's
// that imports transport.
package nettest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/internal/netrules"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// Recorder is a transport.Handler, Calls included, that records what it is
// told, with the time. Its func fields are set before the network calls it.
type Recorder struct {
	ID uint64 // the node it serves, for the tests' own use

	// OnReceive, if set, sees every batch after it is recorded.
	OnReceive func(msgs []*raftpb.Message)
	// Accept decides AcceptSnapshot (nil accepts).
	Accept func(from uint64, m *raftpb.Message) error
	// ReceiveSnap serves ReceiveSnapshot (nil: TakeSnapshot).
	ReceiveSnap func(ctx context.Context, m *raftpb.Message, file string) error
	// Call serves the typed calls, method naming the RPC (nil answers each
	// with an empty response of its type).
	Call func(ctx context.Context, from uint64, method string, req proto.Message) (proto.Message, error)
	// KeepNoCalls: the calls are served but not recorded (a memory test,
	// whose handler must hold nothing it is given).
	KeepNoCalls bool

	mu          sync.Mutex
	batches     []Batch
	unreachable []uint64
	snapReports []SnapReport
	calls       []CallRecord
}

// Batch is one Receive call.
type Batch struct {
	At   time.Time
	Msgs []*raftpb.Message
}

// SnapReport is one ReportSnapshot call.
type SnapReport struct {
	ID     uint64
	Failed bool
	At     time.Time
}

// CallRecord is one typed call served.
type CallRecord struct {
	From   uint64
	Method string
	Req    proto.Message
}

func (r *Recorder) Receive(msgs []*raftpb.Message) {
	r.mu.Lock()
	r.batches = append(r.batches, Batch{At: time.Now(), Msgs: msgs})
	f := r.OnReceive
	r.mu.Unlock()
	if f != nil {
		f(msgs)
	}
}

func (r *Recorder) AcceptSnapshot(from uint64, m *raftpb.Message) error {
	if r.Accept != nil {
		return r.Accept(from, m)
	}
	return nil
}

func (r *Recorder) ReceiveSnapshot(ctx context.Context, m *raftpb.Message, file string) error {
	if r.ReceiveSnap != nil {
		return r.ReceiveSnap(ctx, m, file)
	}
	return r.TakeSnapshot(m, file)
}

// TakeSnapshot is what ReceiveSnapshot does by default, playing the node:
// it renames the file to the snapshot of its index and records the MsgSnap
// as a batch.
func (r *Recorder) TakeSnapshot(m *raftpb.Message, file string) error {
	dst := netrules.SnapshotPath(filepath.Dir(file), m.GetSnapshot().GetMetadata().GetIndex())
	if err := os.Rename(file, dst); err != nil {
		return err
	}
	r.Receive([]*raftpb.Message{m})
	return nil
}

func (r *Recorder) ReportUnreachable(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unreachable = append(r.unreachable, id)
}

func (r *Recorder) ReportSnapshot(id uint64, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snapReports = append(r.snapReports, SnapReport{ID: id, Failed: failed, At: time.Now()})
}

// Batches returns the batches received, in order.
func (r *Recorder) Batches() []Batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// ForgetBatches drops the batches received so far.
func (r *Recorder) ForgetBatches() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = nil
}

// Received returns every message received, in order.
func (r *Recorder) Received() []*raftpb.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*raftpb.Message
	for _, b := range r.batches {
		out = append(out, b.Msgs...)
	}
	return out
}

// ReceivedFrom returns the indexes of the messages received from from.
func (r *Recorder) ReceivedFrom(from uint64) []uint64 {
	var out []uint64
	for _, m := range r.Received() {
		if m.GetFrom() == from {
			out = append(out, m.GetIndex())
		}
	}
	return out
}

// Unreachable returns the ids reported unreachable, in order.
func (r *Recorder) Unreachable() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.unreachable)
}

// UnreachableCount returns how many times id was reported unreachable.
func (r *Recorder) UnreachableCount(id uint64) int {
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

// SnapReports returns the ReportSnapshot calls, in order.
func (r *Recorder) SnapReports() []SnapReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.snapReports)
}

// Calls returns the typed calls served, in order.
func (r *Recorder) Calls() []CallRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

func respond[Req, Resp proto.Message](r *Recorder, ctx context.Context, from uint64, method string, req Req) (Resp, error) {
	r.mu.Lock()
	if !r.KeepNoCalls {
		r.calls = append(r.calls, CallRecord{From: from, Method: method, Req: req})
	}
	f := r.Call
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

func (r *Recorder) Keepalive(ctx context.Context, from uint64, req *transportpb.KeepaliveRequest) (*transportpb.KeepaliveResponse, error) {
	return respond[*transportpb.KeepaliveRequest, *transportpb.KeepaliveResponse](r, ctx, from, "Keepalive", req)
}

func (r *Recorder) Renew(ctx context.Context, from uint64, req *transportpb.RenewRequest) (*transportpb.RenewResponse, error) {
	return respond[*transportpb.RenewRequest, *transportpb.RenewResponse](r, ctx, from, "Renew", req)
}

func (r *Recorder) Removed(ctx context.Context, from uint64, req *transportpb.RemovedRequest) (*transportpb.RemovedResponse, error) {
	return respond[*transportpb.RemovedRequest, *transportpb.RemovedResponse](r, ctx, from, "Removed", req)
}

func (r *Recorder) Leave(ctx context.Context, from uint64, req *transportpb.LeaveRequest) (*transportpb.LeaveResponse, error) {
	return respond[*transportpb.LeaveRequest, *transportpb.LeaveResponse](r, ctx, from, "Leave", req)
}

func (r *Recorder) FwdOpen(ctx context.Context, from uint64, req *transportpb.FwdOpenRequest) (*transportpb.FwdOpenResponse, error) {
	return respond[*transportpb.FwdOpenRequest, *transportpb.FwdOpenResponse](r, ctx, from, "FwdOpen", req)
}

func (r *Recorder) FwdPropose(ctx context.Context, from uint64, req *transportpb.FwdProposeRequest) (*transportpb.FwdProposeResponse, error) {
	return respond[*transportpb.FwdProposeRequest, *transportpb.FwdProposeResponse](r, ctx, from, "FwdPropose", req)
}

func (r *Recorder) FwdPush(ctx context.Context, from uint64, req *transportpb.FwdPushRequest) (*transportpb.FwdPushResponse, error) {
	return respond[*transportpb.FwdPushRequest, *transportpb.FwdPushResponse](r, ctx, from, "FwdPush", req)
}

func (r *Recorder) FwdStatus(ctx context.Context, from uint64, req *transportpb.FwdStatusRequest) (*transportpb.FwdStatusResponse, error) {
	return respond[*transportpb.FwdStatusRequest, *transportpb.FwdStatusResponse](r, ctx, from, "FwdStatus", req)
}

func (r *Recorder) Inspect(ctx context.Context, from uint64, req *transportpb.InspectRequest) (*transportpb.InspectResponse, error) {
	return respond[*transportpb.InspectRequest, *transportpb.InspectResponse](r, ctx, from, "Inspect", req)
}

func (r *Recorder) Form(ctx context.Context, from uint64, req *transportpb.FormRequest) (*transportpb.FormResponse, error) {
	return respond[*transportpb.FormRequest, *transportpb.FormResponse](r, ctx, from, "Form", req)
}

func (r *Recorder) VersionGate(ctx context.Context, from uint64, req *transportpb.VersionGateRequest) (*transportpb.VersionGateResponse, error) {
	return respond[*transportpb.VersionGateRequest, *transportpb.VersionGateResponse](r, ctx, from, "VersionGate", req)
}

func (r *Recorder) Observe(ctx context.Context, from uint64, req *transportpb.ObserveRequest) (*transportpb.ObserveResponse, error) {
	return respond[*transportpb.ObserveRequest, *transportpb.ObserveResponse](r, ctx, from, "Observe", req)
}
