package transport

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/internal/refuse"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// Input limits
//
// gRPC bounds a message's bytes (MaxMsgSize); what those bytes announce is
// bounded here, before anything is allocated for it. A repeated field costs
// its decoder a slice header (24 B) or a struct (a raft entry: ~112 B) per
// element, and an element can be as small as two bytes on the wire, so a
// 4 MiB message of empty elements would otherwise become 50–240 MiB of
// memory. The limits are far above what a correct peer sends (a peer splits
// its batches to stay below them) and turn such a message into an
// InvalidArgument error at the cost of one pass over the bytes.
const (
	// maxBatchMsgs bounds the raft messages in one Batch; maxBatchEntries the
	// raft entries in all of them, maxMsgEntries in one message. A sender's
	// queue holds at most QueueSize (default 4096) messages, so a batch
	// never has more; a raft append of MaxSizePerMsg (1 MiB) of the
	// smallest real entries has fewer entries than maxMsgEntries.
	maxBatchMsgs    = 1 << 14
	maxBatchEntries = 1 << 17
	maxMsgEntries   = 1 << 17
	// maxCallItems bounds the repeated fields of the typed calls (commands
	// in a FwdPropose, items in a push or reply, status queries, voters).
	maxCallItems = 1 << 15
)

// Decode amplification
//
// Decoding a raft message costs memory beyond its bytes (which decoded
// entries alias): about msgDecodeCost per message and entryDecodeCost per
// entry (decodeMessage's blocks, or proto.Unmarshal's allocations), though
// an entry can be two bytes on the wire. What a message or a batch
// announces is charged before anything is decoded (decodeCost), and
// refused when it is more than decodeRatio times its bytes plus
// decodeSlack: 256 KiB of empty entries would have become 15 MiB; now 256
// KiB decodes to at most 8 MiB. Real traffic stays well below: an append's
// entries carry a term, an index and a type (9 bytes or more, 14x), the
// smallest message (a heartbeat answer) has 8 bytes or more (40x, one per
// tick), and the sender splits its batches so that each keeps the ratio
// (writeLoop).
const (
	entryDecodeCost = 128 // entryBlock and its pointer; proto.Unmarshal's entry, term, index and type
	msgDecodeCost   = 320 // messageBlock, its pointer and the batch's slice header
	decodeRatio     = 32
	decodeSlack     = 64 << 10
)

// decodeCost is what decoding msgs messages of entries entries and wire
// bytes costs, the bytes included (decoded messages alias them).
func decodeCost(wire, msgs, entries int) int64 {
	return int64(wire) + int64(msgs)*msgDecodeCost + int64(entries)*entryDecodeCost
}

// decodeAmplified reports whether decoding msgs messages of entries entries
// from wire bytes costs more than decodeRatio times their bytes plus
// decodeSlack.
func decodeAmplified(wire, msgs, entries int) bool {
	return int64(msgs)*msgDecodeCost+int64(entries)*entryDecodeCost > int64(wire)*decodeRatio+decodeSlack
}

// errLimit is the cause of input refused for announcing more elements than a
// limit allows.
var errLimit = errors.New("transport: input over limit")

// limitOf returns the maximum count of any one repeated field of v's type.
func limitOf(v any) int {
	switch v.(type) {
	case *transportpb.Batch:
		return maxBatchMsgs
	case *transportpb.SnapshotChunk, *transportpb.KeepaliveRequest, *transportpb.RenewRequest,
		*transportpb.LeaveRequest, *transportpb.FwdOpenRequest, *transportpb.InspectRequest,
		*transportpb.VersionGateRequest, *transportpb.VersionGateResponse:
		return 0 // no repeated field
	}
	return maxCallItems
}

// checkRepeated walks the top-level fields of b and fails if any field
// number occurs more than max times. Malformed input is left to the
// decoder, which reports it.
func checkRepeated(b []byte, max int) error {
	var counts [32]int
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return nil
		}
		b = b[n:]
		if int(num) < len(counts) {
			counts[num]++
			if counts[num] > max {
				return fmt.Errorf("%w: field %d repeated more than %d times", errLimit, num, max)
			}
		}
	}
	return nil
}

// codec is gRPC's proto codec with checkRepeated before decoding. Used on
// both sides (requests and responses), so a peer's answers are bounded the
// same way.
// A refused message is logged (once per message type and interval) as
// refusedOversize; gRPC answers the call with an error.
type codec struct {
	base    encoding.CodecV2
	refused *refuse.Log
}

// refusedOversize is the refuse.Log kind of messages over a limit.
const refusedOversize = "oversize message"

func newCodec(refused *refuse.Log) codec {
	return codec{base: encoding.GetCodecV2(grpcproto.Name), refused: refused}
}

func (c codec) Name() string { return grpcproto.Name }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(*transportpb.Batch); ok {
		return encodeBatch(b), nil
	}
	return c.base.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if raw, ok := v.(*rawRequest); ok {
		raw.buf = data.MaterializeToBuffer(mem.DefaultBufferPool()) // freed by its reader
		return nil
	}
	if b, ok := v.(*transportpb.Batch); ok {
		// One copy of the whole message, which the messages alias.
		return c.decodeBatch(data.Materialize(), b)
	}
	m, ok := v.(proto.Message)
	if !ok {
		return c.base.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	// Bytes fields are copied out of the buffer (not aliased), so it may be
	// freed.
	return c.decode(buf.ReadOnlyData(), m)
}

// decode is proto.Unmarshal of b into m after checkRepeated.
func (c codec) decode(b []byte, m proto.Message) error {
	if max := limitOf(m); max > 0 {
		if err := checkRepeated(b, max); err != nil {
			c.refused.Refuse(refusedOversize, fmt.Sprintf("%T", m), "bytes", len(b), "err", err)
			return err
		}
	}
	return proto.Unmarshal(b, m)
}
