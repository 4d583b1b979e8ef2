package node

import (
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/lockfsm"
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
	// arena: the room the loop's own commands are encoded into (encode).
	arena []byte

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

// encode returns c encoded, in the batch's arena rather than an allocation
// of its own. The arena is only ever appended to, and each command gets a
// slice whose capacity ends with it, so the bytes stay as encoded for as long
// as raft, the appender or the transport hold them. Nothing on the loop keeps
// them past the turn's flush (a re-proposal encodes again), so a chunk is
// dropped soon after the last command in it is sent or copied.
func (b *proposalBatch) encode(c *lockfsm.Command) []byte {
	if cap(b.arena)-len(b.arena) < arenaRoom {
		b.arena = make([]byte, 0, arenaChunk)
	}
	start := len(b.arena)
	b.arena = c.AppendEncode(b.arena) // a larger command moves the arena, leaving earlier slices as they are
	return b.arena[start:len(b.arena):len(b.arena)]
}

// arenaChunk is the size of an arena chunk: about a hundred plain commands.
// arenaRoom is the least room a command starts in (a lock or unlock with
// names and owners of ordinary length needs under a hundred bytes).
const (
	arenaChunk = 8 << 10
	arenaRoom  = 256
)

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
