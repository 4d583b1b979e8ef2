package simnet

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
)

// Kind says what an Event was.
type Kind uint8

const (
	// Delivered: a raft message was handed to the receiver's Receive.
	Delivered Kind = iota + 1
	// Dropped: a raft message, snapshot transfer or call was lost on the
	// way (Why: the policy, a cut link, no endpoint at the address, a
	// closed sender).
	Dropped
	// Refused: the receiver's checks refused a raft message, snapshot or
	// call before its Handler saw it (Why; Code as the sender sees it).
	Refused
	// Unreachable: the sender was told ReportUnreachable(To).
	Unreachable
	// SnapshotArrived: a snapshot transfer reached the receiver, which now
	// asks AcceptSnapshot, writes the file and calls ReceiveSnapshot.
	SnapshotArrived
	// SnapshotReported: the sender was told ReportSnapshot(To, failed);
	// Code is codes.OK for a snapshot that arrived.
	SnapshotReported
	// CallArrived: a call reached its server's Handler.
	CallArrived
	// CallReturned: a call's outcome reached the caller (Code).
	CallReturned
)

var kindNames = [...]string{"", "delivered", "dropped", "refused", "unreachable", "snapshot-arrived",
	"snapshot-reported", "call-arrived", "call-returned"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Event is one thing the network did, as the trace sees it. From and To
// name the link of the message, transfer or call it is about (a report or
// a call's outcome keeps the direction of what it answers).
type Event struct {
	// At is when it happened, since the Network was made.
	At   time.Duration
	Kind Kind
	From uint64
	To   uint64
	// Type, Term and Index describe a raft message or snapshot (Index: the
	// message's, or the snapshot's for MsgSnap).
	Type  raftpb.MessageType
	Term  uint64
	Index uint64
	// Method names a call.
	Method string
	// Code is a call's outcome or why a snapshot failed (codes.OK if not).
	Code codes.Code
	// Why says why something was dropped or refused.
	Why string
}

func (ev Event) String() string {
	s := fmt.Sprintf("%v %v %d->%d", ev.At, ev.Kind, ev.From, ev.To)
	if ev.Method != "" {
		s += " " + ev.Method
	} else {
		s += fmt.Sprintf(" %v term=%d index=%d", ev.Type, ev.Term, ev.Index)
	}
	if ev.Code != codes.OK {
		s += " code=" + ev.Code.String()
	}
	if ev.Why != "" {
		s += " (" + ev.Why + ")"
	}
	return s
}

// messageEvent describes m.
func messageEvent(k Kind, from, to uint64, m *raftpb.Message) Event {
	ev := Event{Kind: k, From: from, To: to, Type: m.GetType(), Term: m.GetTerm(), Index: m.GetIndex()}
	if m.GetType() == raftpb.MessageType_MsgSnap {
		ev.Index = m.GetSnapshot().GetMetadata().GetIndex()
	}
	return ev
}

// traceHash folds events into a running FNV-1a 64 hash.
type traceHash struct {
	sum   uint64
	count uint64
}

func newTraceHash() traceHash {
	return traceHash{sum: fnv.New64a().Sum64()}
}

// add folds every field of ev.
func (t *traceHash) add(ev Event) {
	h := fnv.New64a()
	var b [8]byte
	put := func(v uint64) {
		binary.LittleEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	put(t.sum)
	put(uint64(ev.At))
	put(uint64(ev.Kind))
	put(ev.From)
	put(ev.To)
	put(uint64(ev.Type))
	put(ev.Term)
	put(ev.Index)
	put(uint64(ev.Code))
	put(uint64(len(ev.Method)))
	h.Write([]byte(ev.Method))
	put(uint64(len(ev.Why)))
	h.Write([]byte(ev.Why))
	t.sum = h.Sum64()
	t.count++
}
