package node

import (
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// proposalBatch collects the commands the loop proposes during one turn, so
// raft sees them as one MsgProp. raft's leader appends a MsgProp's entries
// together and sends one MsgApp per follower for them; proposing one entry at
// a time (RawNode.Propose) sends a MsgApp per entry per follower, which the
// followers must each receive, step and acknowledge. On a follower the batch
// is forwarded to the leader as one message. Owned by the loop.
type proposalBatch struct {
	ents []*raftpb.Entry
	ops  []*op // parallel to ents: the session op each entry carries, or nil
	// slab: entries not handed out yet, allocated entrySlab at a time
	// rather than one by one. raft's leader copies each proposed entry
	// (appendEntry), and a follower's forwarded MsgProp is marshalled by the
	// transport; an entry is never reused, so a slab lives until the last
	// of its entries is dropped.
	slab []raftpb.Entry

	// Set at start.
	rn *raft.RawNode
	id uint64
}

// add queues data for the batch the loop flushes before it next asks raft
// for a Ready. o, if non-nil, is marked for a retry on the next tick when
// raft drops the batch (no leader yet, a transfer in progress).
func (b *proposalBatch) add(data []byte, o *op) {
	if len(b.slab) == 0 {
		b.slab = make([]raftpb.Entry, entrySlab)
	}
	e := &b.slab[0]
	b.slab = b.slab[1:]
	e.Data = data
	b.ents = append(b.ents, e)
	b.ops = append(b.ops, o)
}

// entrySlab is how many entries proposalBatch allocates at a time.
const entrySlab = 64

// addForwarded queues entries forwarded by another node (a MsgProp),
// unchanged.
func (b *proposalBatch) addForwarded(ents []*raftpb.Entry) {
	for _, e := range ents {
		b.ents = append(b.ents, e)
		b.ops = append(b.ops, nil)
	}
}

// flush steps the queued entries into raft as one MsgProp.
func (b *proposalBatch) flush() {
	if len(b.ents) == 0 {
		return
	}
	ents, ops := b.ents, b.ops
	b.ents, b.ops = nil, b.ops[:0]
	m := &raftpb.Message{Type: raftpb.MessageType_MsgProp.Enum(), From: &b.id, Entries: ents}
	if err := b.rn.Step(m); err != nil {
		for _, o := range ops {
			if o != nil {
				o.proposedAt = time.Time{} // retried on the next tick
			}
		}
	}
	clear(ops)
}
