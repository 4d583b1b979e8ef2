package simnet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/internal/netrules"
	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/transport"
)

// Snapshot transfers
//
// As transport does (transport/snapshot.go): a MsgSnap travels with its
// file, SnapshotPath(sender's SnapshotDir, index), which the sender reads
// when it sends. At the receiver the transfer passes authenticate (and may
// make it adopt the sender's formation), the header check and the node's
// AcceptSnapshot, on the delivery goroutine; one transfer is received at a
// time. Then, on a goroutine of its own, the file is written to a temporary
// file in the receiver's SnapshotDir and handed to ReceiveSnapshot, which
// owns it on success (on failure it is removed). The sender is told the
// outcome with ReportSnapshot after the return link's delay: failed if
// anything failed on the way, including the acknowledgement (a return link
// cut when it comes back).

// snapFile is a snapshot file as the sender read it.
type snapFile struct {
	data []byte
	err  error
}

func readSnapshot(dir string, m *raftpb.Message) snapFile {
	data, err := os.ReadFile(transport.SnapshotPath(dir, m.GetSnapshot().GetMetadata().GetIndex()))
	return snapFile{data: data, err: err}
}

// sendSnapshotLocked queues the transfer of m and its file from e. n.mu
// held.
func (n *Network) sendSnapshotLocked(now time.Time, e *Endpoint, m *raftpb.Message, addr string, f snapFile) {
	to := m.GetTo()
	ev := n.rpcEventLocked(now, e.id, to, chSnap, evSnap, addr)
	m = proto.Clone(m).(*raftpb.Message)
	if f.err != nil {
		e.log.Warn("simnet: snapshot send failed", "peer", views.MemberID(to), "index", m.GetSnapshot().GetMetadata().GetIndex(), "err", f.err)
		n.scheduleLocked(&event{at: now, from: e.id, to: to, ch: chSnapReport, seq: ev.seq, kind: evSnapReport, src: e,
			msg: m, failed: true, code: codes.Unknown, why: "snapshot file unreadable"})
		return
	}
	ev.src, ev.env, ev.msg, ev.snapData = e, e.envelope(false), m, f.data
	n.scheduleLocked(ev)
}

// scheduleSnapReportLocked queues ReportSnapshot(to, failed) for src at
// at (a transfer that never started). n.mu held.
func (n *Network) scheduleSnapReportLocked(at time.Time, src *Endpoint, to, seq uint64, m *raftpb.Message, why string) {
	n.scheduleLocked(&event{at: at, from: src.id, to: to, ch: chSnapReport, seq: seq, kind: evSnapReport, src: src,
		msg: m, failed: true, code: codes.Unavailable, why: why})
}

// finishSnapshot queues the outcome of transfer ev for its sender, after
// the return link's delay from now.
func (n *Network) finishSnapshot(ev *event, code codes.Code, why string) {
	n.mu.Lock()
	at := time.Now().Add(n.faults.policyOf(ev.to, ev.from).delay(ev.back))
	n.scheduleLocked(&event{at: at, from: ev.from, to: ev.to, ch: chSnapReport, seq: ev.seq, kind: evSnapReport,
		src: ev.src, msg: ev.msg, failed: code != codes.OK, code: code, why: why})
	n.mu.Unlock()
	n.poke()
}

// arriveSnapshot executes a transfer's arrival at its receiver.
func (n *Network) arriveSnapshot(ev *event) {
	dst, why := n.reach(ev.src, ev.from, ev.to, ev.lost)
	if dst == nil {
		n.record(dropped(ev, why))
		if why != lostSender {
			n.finishSnapshot(ev, codes.Unavailable, why)
		}
		return
	}
	m, src := ev.msg, views.MemberID(ev.from).String()
	err := dst.authenticate(ev.from, "Snapshot", ev.env, true)
	if err == nil {
		err = checkSnapshotHeader(m, dst.id, ev.from, uint64(len(ev.snapData)), dst.cfg.MaxSnapshotSize)
		if err == nil {
			err = dst.cfg.Handler.AcceptSnapshot(ev.from, proto.Clone(m).(*raftpb.Message))
		}
		if err != nil {
			if errors.Is(err, transport.ErrPermissionDenied) || errors.Is(err, errBadHeader) {
				dst.refused.Refuse(refusedSnapshot, src, "reason", "refused before transfer", "err", err)
			} else {
				dst.refused.Note(refusedSnapshot, src, "reason", "not now", "err", err)
			}
			err = status.Errorf(codes.PermissionDenied, "snapshot refused: %v", err)
		}
	}
	if err == nil {
		n.mu.Lock()
		busy := dst.receivingSnap
		dst.receivingSnap = true
		n.mu.Unlock()
		if busy {
			dst.refused.Refuse(refusedSnapshot, src, "reason", "another snapshot is being received")
			err = status.Error(codes.ResourceExhausted, "another snapshot is being received")
		}
	}
	if err != nil {
		r := messageEvent(Refused, ev.from, ev.to, m)
		r.Code, r.Why = status.Code(err), refusalWhy(err)
		n.record(r)
		dst.leave()
		n.finishSnapshot(ev, status.Code(err), r.Why)
		return
	}
	n.record(messageEvent(SnapshotArrived, ev.from, ev.to, m))
	go n.serveSnapshot(dst, ev)
}

// serveSnapshot writes the transfer's file and hands it to dst's
// ReceiveSnapshot, on a goroutine of its own. It releases dst when done.
func (n *Network) serveSnapshot(dst *Endpoint, ev *event) {
	defer dst.leave()
	defer func() {
		n.mu.Lock()
		dst.receivingSnap = false
		n.mu.Unlock()
	}()
	// The transfer's context ends when either end closes.
	ctx, cancel := context.WithCancel(dst.ctx)
	defer cancel()
	stop := context.AfterFunc(ev.src.ctx, cancel)
	defer stop()
	index := ev.msg.GetSnapshot().GetMetadata().GetIndex()
	src := views.MemberID(ev.from).String()
	tmp, err := writeSnapshotTemp(dst.cfg.SnapshotDir, index, ev.snapData)
	if err != nil {
		dst.refused.Refuse(refusedSnapshot, src, "reason", "transfer failed", "index", index, "err", err)
		n.finishSnapshot(ev, codes.Internal, "receiver could not write the file")
		return
	}
	if err := dst.cfg.Handler.ReceiveSnapshot(ctx, ev.msg, tmp); err != nil {
		_ = os.Remove(tmp)
		n.finishSnapshot(ev, codes.Unavailable, "snapshot not taken")
		return
	}
	n.finishSnapshot(ev, codes.OK, "")
}

// writeSnapshotTemp writes data to a new temporary file of the transfer in
// dir (named as transport names it), synced, and returns its name.
func writeSnapshotTemp(dir string, index uint64, data []byte) (string, error) {
	f, err := os.CreateTemp(dir, netrules.SnapshotTempPattern(index))
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// errBadHeader: a transfer no correct sender makes.
var errBadHeader = errors.New("bad snapshot header")

// checkSnapshotHeader is transport's check of a transfer before anything
// is written: a MsgSnap with metadata, between these two nodes, with no
// entries or responses, of a non-zero index, announcing at most max bytes.
func checkSnapshotHeader(m *raftpb.Message, local, from, size uint64, max int64) error {
	switch {
	case m.GetType() != raftpb.MessageType_MsgSnap || m.GetTo() != local || m.GetFrom() != from ||
		m.GetSnapshot().GetMetadata() == nil:
		return fmt.Errorf("%w: not a MsgSnap from %016x to %016x: type %v from %016x to %016x",
			errBadHeader, from, local, m.GetType(), m.GetFrom(), m.GetTo())
	case len(m.GetEntries()) > 0 || len(m.GetResponses()) > 0:
		return fmt.Errorf("%w: MsgSnap with entries or responses", errBadHeader)
	case m.GetSnapshot().GetMetadata().GetIndex() == 0:
		return fmt.Errorf("%w: snapshot of index 0", errBadHeader)
	case size > uint64(max):
		return fmt.Errorf("%w: snapshot of %d bytes is over the limit of %d", errBadHeader, size, max)
	}
	return nil
}

// reportSnapshot executes a transfer's outcome at its sender.
func (n *Network) reportSnapshot(ev *event) {
	n.mu.Lock()
	failed, code, why := ev.failed, ev.code, ev.why
	if !failed && !n.faults.up(ev.to, ev.from) {
		failed, code, why = true, codes.Unavailable, lostReturned
	}
	ok := ev.src.enterLocked()
	n.mu.Unlock()
	if !ok {
		n.record(Event{Kind: Dropped, From: ev.from, To: ev.to, Type: raftpb.MessageType_MsgSnap,
			Why: "report to a closed sender"})
		return
	}
	defer ev.src.leave()
	r := messageEvent(SnapshotReported, ev.from, ev.to, ev.msg)
	r.Code, r.Why = code, why
	n.record(r)
	if failed {
		ev.src.log.Warn("simnet: snapshot send failed", "peer", views.MemberID(ev.to), "index", r.Index, "code", code, "why", why)
	}
	ev.src.cfg.Handler.ReportSnapshot(ev.to, failed)
}
