package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A WAL record is
//
//	[length uint32 LE][crc32c uint32 LE][type byte][payload: length bytes]
//
// where the CRC (Castagnoli) covers the type byte and the payload.
const (
	recHeaderSize = 9
	// maxRecord bounds a record's payload; a larger length field is garbage.
	maxRecord = 1 << 30
)

// Record types. Replaying them in order with walState.apply rebuilds the log exactly.
const (
	// recState: the whole state at the start of a segment (always its first record):
	// compaction point, last index, HardState, ConfState, snapshot.
	recState byte = 1 + iota
	// recEntry: one entry. Appending index i first drops every entry >= i, so the
	// conflicting suffix needs no separate marker: an entry record IS the truncate-from
	// marker for its index.
	recEntry
	recHardState
	// recSnapInstall: a snapshot installed through Save; the log is replaced.
	recSnapInstall
	// recSnapCreate: CreateSnapshot; only the snapshot changes.
	recSnapCreate
	recConfState
	// recCompact: 16 bytes, index and term of the new compaction point.
	recCompact
	// recBatch: the records of one Save, framed as above, one after the other. One
	// checksum covers them all, so a torn Save is cut off whole: recovery never sees
	// half of a Save (say its entries without its HardState).
	recBatch
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// typeCRCs[t] is the checksum of the type byte t, where every record's
// checksum starts: computed once, since a []byte{t} handed to crc32 escapes
// to the heap, which was an allocation per record read or written.
var typeCRCs = func() (c [256]uint32) {
	for t := range c {
		c[t] = crc32.Update(0, crcTable, []byte{byte(t)})
	}
	return c
}()

// errTorn means the bytes end inside a record (or its checksum fails): a torn write
// when it is the tail of the last segment, corruption elsewhere.
var errTorn = errors.New("torn or corrupt record")

// appendRecord appends one framed record to buf.
func appendRecord(buf []byte, typ byte, payload []byte) []byte {
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(payload)))
	c := typeCRCs[typ]
	c = crc32.Update(c, crcTable, payload)
	buf = binary.LittleEndian.AppendUint32(buf, c)
	buf = append(buf, typ)
	return append(buf, payload...)
}

// appendProtoRecord marshals m straight into a framed record appended to buf.
func appendProtoRecord(buf []byte, typ byte, m proto.Message) ([]byte, error) {
	start := len(buf)
	buf = append(buf, make([]byte, recHeaderSize)...)
	buf, err := proto.MarshalOptions{}.MarshalAppend(buf, m)
	if err != nil {
		return buf[:start], err
	}
	payload := buf[start+recHeaderSize:]
	binary.LittleEndian.PutUint32(buf[start:], uint32(len(payload)))
	c := typeCRCs[typ]
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Update(c, crcTable, payload))
	buf[start+8] = typ
	return buf, nil
}

// beginBatch reserves room for a recBatch header at the end of buf; endBatch fills it in
// once the inner records have been appended after it.
func beginBatch(buf []byte) ([]byte, int) {
	return append(buf, make([]byte, recHeaderSize)...), len(buf)
}

func endBatch(buf []byte, start int) []byte {
	payload := buf[start+recHeaderSize:]
	binary.LittleEndian.PutUint32(buf[start:], uint32(len(payload)))
	c := typeCRCs[recBatch]
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Update(c, crcTable, payload))
	buf[start+8] = recBatch
	return buf
}

// readRecord decodes the record at the start of b, returning its type, payload (aliasing
// b) and total size. errTorn if b ends inside it or its checksum fails.
func readRecord(b []byte) (typ byte, payload []byte, n int, err error) {
	if len(b) < recHeaderSize {
		return 0, nil, 0, errTorn
	}
	l := binary.LittleEndian.Uint32(b)
	if l > maxRecord || uint64(len(b)-recHeaderSize) < uint64(l) {
		return 0, nil, 0, errTorn
	}
	typ, payload = b[8], b[recHeaderSize:recHeaderSize+int(l)]
	c := typeCRCs[typ]
	if crc32.Update(c, crcTable, payload) != binary.LittleEndian.Uint32(b[4:]) {
		return 0, nil, 0, errTorn
	}
	return typ, payload, recHeaderSize + int(l), nil
}

// stateRecord is the payload of recState.
type stateRecord struct {
	dummyIndex, dummyTerm, last uint64
	hs                          *raftpb.HardState // nil if none
	cs                          *raftpb.ConfState // nil if none
	csIndex                     uint64            // the index cs reflects (confstate.go)
	snap                        *raftpb.Snapshot
}

const nilLen = ^uint32(0)

func (r *stateRecord) marshal() ([]byte, error) {
	b := binary.LittleEndian.AppendUint64(nil, r.dummyIndex)
	b = binary.LittleEndian.AppendUint64(b, r.dummyTerm)
	b = binary.LittleEndian.AppendUint64(b, r.last)
	for i, m := range []proto.Message{r.hs, r.cs, r.snap} {
		if m == nil || !m.ProtoReflect().IsValid() {
			b = binary.LittleEndian.AppendUint32(b, nilLen)
			continue
		}
		var v []byte
		var err error
		if i == 1 {
			v, err = marshalConfState(r.cs, r.csIndex)
		} else {
			v, err = proto.Marshal(m)
		}
		if err != nil {
			return nil, err
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b, nil
}

func (r *stateRecord) unmarshal(b []byte) error {
	if len(b) < 24 {
		return fmt.Errorf("state record of %d bytes", len(b))
	}
	r.dummyIndex = binary.LittleEndian.Uint64(b)
	r.dummyTerm = binary.LittleEndian.Uint64(b[8:])
	r.last = binary.LittleEndian.Uint64(b[16:])
	b = b[24:]
	hs, cs, snap := &raftpb.HardState{}, &raftpb.ConfState{}, &raftpb.Snapshot{}
	for i, m := range []proto.Message{hs, cs, snap} {
		if len(b) < 4 {
			return fmt.Errorf("state record truncated")
		}
		l := binary.LittleEndian.Uint32(b)
		b = b[4:]
		if l == nilLen {
			continue
		}
		if uint64(l) > uint64(len(b)) {
			return fmt.Errorf("state record truncated")
		}
		if i == 1 {
			c, index, err := unmarshalConfState(b[:l])
			if err != nil {
				return fmt.Errorf("state record: %v", err)
			}
			cs, r.csIndex = c, index
		} else if err := proto.Unmarshal(b[:l], m); err != nil {
			return fmt.Errorf("state record: %v", err)
		}
		b = b[l:]
		switch i {
		case 0:
			r.hs = hs
		case 1:
			r.cs = cs
		case 2:
			r.snap = snap
		}
	}
	if len(b) != 0 {
		return fmt.Errorf("state record has %d trailing bytes", len(b))
	}
	return nil
}

func compactPayload(index, term uint64) []byte {
	return binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, index), term)
}

// topLevel reports whether records of type typ stand on their own in a segment (the
// others only appear inside a recBatch).
func topLevel(typ byte) bool {
	switch typ {
	case recState, recBatch, recSnapCreate, recConfState, recCompact:
		return true
	}
	return false
}
