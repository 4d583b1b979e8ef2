package transport

import (
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/lockraft/lockraft/transport/transportpb"
)

// A raft stream's Batch is the one message every heartbeat, append and
// acknowledgement travels in, so the codec encodes and decodes it by hand
// rather than through protobuf's reflection: its messages are already
// encoded raft messages, and the Batch is only their framing (field 1, one
// bytes value each). The bytes are what proto.Marshal and proto.Unmarshal
// give and take (TestEncodeBatchMatchesProto, FuzzDecodeBatch).

// encodeBatch is proto.Marshal of m, into one buffer (from gRPC's pool when
// it is large enough to be pooled, as gRPC's own codec does). m's messages
// are copied: the caller may reuse m and its messages once it returns.
func encodeBatch(m *transportpb.Batch) mem.BufferSlice {
	size := 0
	for _, b := range m.Msgs {
		size += protowire.SizeTag(batchMsgsField) + protowire.SizeBytes(len(b))
	}
	pooled := !mem.IsBelowBufferPoolingThreshold(size)
	var out []byte
	var buf *[]byte
	if pooled {
		buf = mem.DefaultBufferPool().Get(size)
		out = (*buf)[:0]
	} else {
		out = make([]byte, 0, size)
	}
	for _, b := range m.Msgs {
		out = protowire.AppendTag(out, batchMsgsField, protowire.BytesType)
		out = protowire.AppendBytes(out, b)
	}
	if !pooled {
		return mem.BufferSlice{mem.SliceBuffer(out)}
	}
	*buf = out // the same array: size is exact
	return mem.BufferSlice{mem.NewBuffer(buf, mem.DefaultBufferPool())}
}

// decodeBatch is decode for a raft stream's Batch, with its messages
// aliasing b (which the caller gives up) instead of one copy each, and m's
// Msgs reused: a batch costs one allocation, not one per message. It reads
// what proto.Unmarshal reads: field 1 of the bytes wire type is a message;
// anything else well-formed is skipped (proto.Unmarshal would keep it as
// unknown fields, which nothing reads); malformed bytes are an error.
func (c codec) decodeBatch(b []byte, m *transportpb.Batch) error {
	clear(m.Msgs)
	m.Msgs = m.Msgs[:0]
	if err := checkRepeated(b, maxBatchMsgs); err != nil {
		c.refused.Refuse(refusedOversize, fmt.Sprintf("%T", m), "bytes", len(b), "err", err)
		return err
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("transport: batch: %w", protowire.ParseError(n))
		}
		if num > protowire.MaxValidNumber {
			return fmt.Errorf("transport: batch: field number %d out of range", num)
		}
		b = b[n:]
		if num == batchMsgsField && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return fmt.Errorf("transport: batch: %w", protowire.ParseError(n))
			}
			m.Msgs = append(m.Msgs, v[:len(v):len(v)])
			b = b[n:]
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return fmt.Errorf("transport: batch: %w", protowire.ParseError(n))
		}
		b = b[n:]
	}
	return nil
}

// batchMsgsField is transportpb.Batch's msgs field number.
const batchMsgsField = 1
