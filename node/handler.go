package node

import (
	"context"
	"encoding/binary"
	"fmt"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// transportHandler is the Node as the transport sees it. Its methods never
// block for long: they hand work to the loop.
type transportHandler Node

// Receive queues raft messages for the loop. If the loop is far behind the
// batch is dropped; raft retransmits.
func (h *transportHandler) Receive(msgs []*raftpb.Message) {
	n := (*Node)(h)
	if msgs = n.cfg.Faults.filterIn(msgs); len(msgs) == 0 {
		return
	}
	if p := n.cfg.TestHooks.Stages; p != nil {
		for _, m := range msgs {
			if m.GetType() == raftpb.MessageType_MsgApp {
				p.entries(n.id, stageReceived, m)
			}
		}
	}
	select {
	case n.recvc <- msgs:
	case <-n.stopc:
	default:
		n.log.Debug("receive queue full; dropping batch", "msgs", len(msgs))
	}
}

func (h *transportHandler) ReportUnreachable(id uint64) {
	n := (*Node)(h)
	n.tryDo(func() { n.rn.ReportUnreachable(id) })
}

func (h *transportHandler) ReportSnapshot(id uint64, failed bool) {
	n := (*Node)(h)
	st := raft.SnapshotFinish
	if failed {
		st = raft.SnapshotFailure
	}
	// Never dropped: an unreported snapshot leaves the follower paused.
	select {
	case n.reqc <- func() { n.rn.ReportSnapshot(id, st) }:
	case <-n.stopc:
	}
}

// HandleCall serves node-to-node calls: keepalives and lease renewals, which
// only the leader answers.
func (h *transportHandler) HandleCall(ctx context.Context, from uint64, method string, req []byte) ([]byte, error) {
	n := (*Node)(h)
	if !n.cfg.Faults.allowsIn(from) {
		return nil, fmt.Errorf("lockraft: call from %d blocked by fault injection", from)
	}
	switch method {
	case methodKeepalive:
		if len(req) != 8 {
			return nil, fmt.Errorf("lockraft: bad keepalive request from %d", from)
		}
		st := n.localKeepalive(ctx, binary.BigEndian.Uint64(req))
		return []byte{byte(st)}, nil
	case methodRenew:
		name, token, err := decodeRenew(req)
		if err != nil {
			return nil, err
		}
		return []byte{byte(n.localRenew(ctx, renewRequest{name: name, token: token}))}, nil
	case methodRenewHold:
		r, err := decodeRenewHold(req)
		if err != nil {
			return nil, err
		}
		return []byte{byte(n.localRenew(ctx, r))}, nil
	case methodVersionGate:
		return n.handleVersionGate(ctx)
	case methodObserve:
		return n.handleObserve(ctx, from, req)
	case methodRemoved:
		return n.handleRemoved(from)
	case methodLeave:
		return n.handleLeave(ctx, from)
	case methodFwdOpen, methodFwdPropose, methodFwdPush, methodFwdStatus:
		return n.handleFwd(ctx, from, method, req)
	}
	return nil, fmt.Errorf("lockraft: unknown method %q from %d", method, from)
}

// tryDo runs f in the loop without blocking the caller when the loop is busy
// or gone; for reports raft can live without.
func (n *Node) tryDo(f func()) {
	select {
	case n.reqc <- f:
	default:
	}
}
