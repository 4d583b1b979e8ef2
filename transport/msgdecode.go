package transport

import (
	"errors"
	"fmt"
	"math"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// decodeMessage decodes one marshalled raft message, as proto.Unmarshal
// would, with a handful of allocations instead of several per entry.
//
// raftpb (proto2, raft v3.7) has a pointer for every scalar field, so the
// generic decoder allocates each Term, Index and Type of each entry, the
// entry itself and a copy of its data: about five allocations per entry,
// the largest share of this process's garbage under load. The common
// messages (appends, acknowledgements, votes, heartbeats) are decoded here
// into one block per message and one per batch of entries; entry Data and
// Context alias b, which the caller must not modify afterwards. Anything
// else (a snapshot, responses, an unknown field or enum value, a malformed
// field) goes to proto.Unmarshal, so the result is always what it would
// have produced (FuzzDecodeMessage), except that a message announcing more
// than maxMsgEntries entries, or entries that would cost more than
// decodeRatio times its bytes (limits.go), is refused (errLimit) before
// either decoder allocates anything for them, and one with a message or
// entry type raft does not define is refused (errUnknownEnum).
func decodeMessage(b []byte) (*raftpb.Message, error) {
	return decodeCounted(b, countEntries(b))
}

// decodeCounted is decodeMessage of b, whose entries the caller counted
// (countEntries).
func decodeCounted(b []byte, n int) (*raftpb.Message, error) {
	if n > maxMsgEntries {
		return nil, fmt.Errorf("%w: %d entries in one message", errLimit, n)
	}
	if decodeAmplified(len(b), 1, n) {
		return nil, fmt.Errorf("%w: %d entries in %d bytes", errLimit, n, len(b))
	}
	if m, ok := decodeMessageFast(b); ok {
		return m, nil
	}
	m := &raftpb.Message{}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, err
	}
	if err := knownEnums(m); err != nil {
		return nil, err
	}
	return m, nil
}

// errUnknownEnum is the cause of a refused message whose type, or an
// entry's type, is not one raft defines. proto.Unmarshal keeps such values
// (even negative ones), and raft indexes arrays with the message type
// (IsLocalMsg): a message of type -5 panicked RawNode.Step (found by
// FuzzRaftMessageGuard).
var errUnknownEnum = errors.New("transport: unknown raft message or entry type")

// knownEnums checks m's type and its entries' types.
func knownEnums(m *raftpb.Message) error {
	if _, ok := raftpb.MessageType_name[int32(m.GetType())]; !ok {
		return fmt.Errorf("%w: message type %d", errUnknownEnum, m.GetType())
	}
	for _, e := range m.GetEntries() {
		if _, ok := raftpb.EntryType_name[int32(e.GetType())]; !ok {
			return fmt.Errorf("%w: entry type %d", errUnknownEnum, e.GetType())
		}
	}
	return nil
}

// messageBlock holds a message and the values its pointer fields point to.
type messageBlock struct {
	msg    raftpb.Message
	typ    raftpb.MessageType
	reject bool
	u      [8]uint64
}

// entryBlock holds an entry and the values its pointer fields point to.
type entryBlock struct {
	e           raftpb.Entry
	typ         raftpb.EntryType
	term, index uint64
}

// Field numbers of raftpb.Message and raftpb.Entry (raft.proto).
const (
	msgType, msgTo, msgFrom, msgTerm, msgLogTerm, msgIndex = 1, 2, 3, 4, 5, 6
	msgEntries, msgCommit, msgSnapshot, msgReject          = 7, 8, 9, 10
	msgRejectHint, msgContext, msgVote, msgResponses       = 11, 12, 13, 14

	entType, entTerm, entIndex, entData = 1, 2, 3, 4
)

// countEntries returns how many entries field (7) occurrences b holds,
// walking the top-level fields only. Malformed framing is not an error here
// (the decoder reports it); the count is then of the well-formed prefix.
func countEntries(b []byte) int {
	n := 0
	for p := b; len(p) > 0; {
		num, typ, l := protowire.ConsumeTag(p)
		if l < 0 {
			break
		}
		p = p[l:]
		if num == msgEntries && typ == protowire.BytesType {
			n++
		}
		if l = protowire.ConsumeFieldValue(num, typ, p); l < 0 {
			break
		}
		p = p[l:]
	}
	return n
}

// decodeMessageFast decodes the common messages; false means "use
// proto.Unmarshal". The entry count was bounded by decodeMessage.
func decodeMessageFast(b []byte) (*raftpb.Message, bool) {
	// First pass: check the framing and count the entries.
	n := 0
	for p := b; len(p) > 0; {
		num, typ, l := protowire.ConsumeTag(p)
		if l < 0 {
			return nil, false
		}
		p = p[l:]
		if num == msgSnapshot || num == msgResponses {
			return nil, false
		}
		if num == msgEntries && typ == protowire.BytesType {
			n++
		}
		if l = protowire.ConsumeFieldValue(num, typ, p); l < 0 {
			return nil, false
		}
		p = p[l:]
	}
	blk := &messageBlock{}
	m := &blk.msg
	var ents []entryBlock
	if n > 0 {
		ents = make([]entryBlock, n)
		m.Entries = make([]*raftpb.Entry, 0, n)
	}
	for p := b; len(p) > 0; {
		num, typ, l := protowire.ConsumeTag(p)
		p = p[l:]
		switch typ {
		case protowire.VarintType:
			v, l := protowire.ConsumeVarint(p)
			p = p[l:]
			switch num {
			case msgType:
				if v > math.MaxInt32 {
					return nil, false
				}
				if _, ok := raftpb.MessageType_name[int32(v)]; !ok {
					return nil, false // proto2 keeps unknown enum values as unknown fields
				}
				blk.typ = raftpb.MessageType(v)
				m.Type = &blk.typ
			case msgReject:
				blk.reject = protowire.DecodeBool(v)
				m.Reject = &blk.reject
			case msgTo:
				m.To = setU(&blk.u[0], v)
			case msgFrom:
				m.From = setU(&blk.u[1], v)
			case msgTerm:
				m.Term = setU(&blk.u[2], v)
			case msgLogTerm:
				m.LogTerm = setU(&blk.u[3], v)
			case msgIndex:
				m.Index = setU(&blk.u[4], v)
			case msgCommit:
				m.Commit = setU(&blk.u[5], v)
			case msgRejectHint:
				m.RejectHint = setU(&blk.u[6], v)
			case msgVote:
				m.Vote = setU(&blk.u[7], v)
			default:
				return nil, false
			}
		case protowire.BytesType:
			v, l := protowire.ConsumeBytes(p)
			p = p[l:]
			switch num {
			case msgEntries:
				e := &ents[len(m.Entries)]
				if !decodeEntry(v, e) {
					return nil, false
				}
				m.Entries = append(m.Entries, &e.e)
			case msgContext:
				m.Context = v[:len(v):len(v)]
			default:
				return nil, false
			}
		default:
			return nil, false
		}
	}
	return m, true
}

func setU(p *uint64, v uint64) *uint64 {
	*p = v
	return p
}

func decodeEntry(b []byte, blk *entryBlock) bool {
	e := &blk.e
	for p := b; len(p) > 0; {
		num, typ, l := protowire.ConsumeTag(p)
		if l < 0 {
			return false
		}
		p = p[l:]
		switch {
		case typ == protowire.VarintType:
			v, l := protowire.ConsumeVarint(p)
			if l < 0 {
				return false
			}
			p = p[l:]
			switch num {
			case entType:
				if v > math.MaxInt32 {
					return false
				}
				if _, ok := raftpb.EntryType_name[int32(v)]; !ok {
					return false
				}
				blk.typ = raftpb.EntryType(v)
				e.Type = &blk.typ
			case entTerm:
				e.Term = setU(&blk.term, v)
			case entIndex:
				e.Index = setU(&blk.index, v)
			default:
				return false
			}
		case typ == protowire.BytesType && num == entData:
			v, l := protowire.ConsumeBytes(p)
			if l < 0 {
				return false
			}
			p = p[l:]
			e.Data = v[:len(v):len(v)]
		default:
			return false
		}
	}
	return true
}
