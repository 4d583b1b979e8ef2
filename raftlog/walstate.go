package raftlog

import (
	"encoding/binary"
	"fmt"

	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// walState is the WAL's in-memory log: every record, live or replayed, goes through
// apply, so a reopened WAL holds exactly what the running one held.
type walState struct {
	logState
	// ents holds entries base, base+1, ...; last is the last index. During replay
	// base may exceed dummyIndex+1: entries (dummyIndex, base) live in deleted
	// segments and must be compacted away before replay ends.
	base uint64
	ents []*raftpb.Entry
	// replayed is set once a record has been applied.
	replayed bool
	// floor: during replay, entries at or below it are known to be compacted
	// away before replay ends (replayFloor), so they are neither decoded nor
	// held: a skipped entry i moves base past it, as if it were in a deleted
	// segment. skipped reports whether any were; settled checks the promise.
	floor   uint64
	skipped bool
}

func newWalState() *walState {
	return &walState{logState: logState{snap: raftpb.EnsureSnapshot(nil)}, base: 1}
}

// complete reports whether every entry (dummyIndex, last] is held.
func (st *walState) complete() bool {
	return st.base == st.dummyIndex+1 && st.last == st.dummyIndex+uint64(len(st.ents))
}

func (st *walState) stateRecord() *stateRecord {
	return &stateRecord{dummyIndex: st.dummyIndex, dummyTerm: st.dummyTerm, last: st.last,
		hs: st.hardState, cs: st.confState, csIndex: st.confIndex, snap: st.snap}
}

// apply applies one decoded record. Payloads are not retained (protos are copied by
// Unmarshal); an error means the record contradicts the state: corruption.
func (st *walState) apply(typ byte, payload []byte) error {
	err := st.apply1(typ, payload)
	st.replayed = true // not deferred: apply runs once per record, a deferred call costs
	return err
}

func (st *walState) apply1(typ byte, payload []byte) error {
	switch typ {
	case recEntry:
		if st.floor > 0 {
			if i, ok := entryIndex(payload); ok && i <= st.floor {
				st.skipped = true
				return st.skipEntry(i)
			}
		}
		e := &raftpb.Entry{}
		if err := proto.Unmarshal(payload, e); err != nil {
			return fmt.Errorf("entry: %v", err)
		}
		return st.appendEntry(e.GetIndex(), e)
	case recHardState:
		hs := &raftpb.HardState{}
		if err := proto.Unmarshal(payload, hs); err != nil {
			return fmt.Errorf("hardstate: %v", err)
		}
		st.hardState = hs
	case recConfState:
		cs, index, err := unmarshalConfState(payload)
		if err != nil {
			return fmt.Errorf("confstate: %v", err)
		}
		st.confState, st.confIndex = cs, index
	case recSnapInstall, recSnapCreate:
		snap := &raftpb.Snapshot{}
		if err := proto.Unmarshal(payload, snap); err != nil {
			return fmt.Errorf("snapshot: %v", err)
		}
		snap = raftpb.EnsureSnapshot(snap)
		if typ == recSnapCreate {
			st.snap = snap
			return nil
		}
		st.installSnapshot(snap)
	case recBatch:
		for len(payload) > 0 {
			typ, inner, n, err := readRecord(payload)
			if err != nil {
				return fmt.Errorf("batch: %v", err)
			}
			if typ == recBatch || typ == recState {
				return fmt.Errorf("batch holds a record of type %d", typ)
			}
			if err := st.apply(typ, inner); err != nil {
				return err
			}
			payload = payload[n:]
		}
	case recCompact:
		if len(payload) != 16 {
			return fmt.Errorf("compact record of %d bytes", len(payload))
		}
		return st.compact(binary.LittleEndian.Uint64(payload), binary.LittleEndian.Uint64(payload[8:]))
	case recState:
		var r stateRecord
		if err := r.unmarshal(payload); err != nil {
			return err
		}
		if r.last < r.dummyIndex {
			return fmt.Errorf("state record: last %d before compaction point %d", r.last, r.dummyIndex)
		}
		if st.replayed {
			// A later segment's state repeats what replay already built.
			if r.last != st.last || r.dummyIndex != st.dummyIndex || r.dummyTerm != st.dummyTerm {
				return fmt.Errorf("state record (%d@%d, %d] disagrees with the log (%d@%d, %d]",
					r.dummyIndex, r.dummyTerm, r.last, st.dummyIndex, st.dummyTerm, st.last)
			}
		} else {
			// The first segment: entries up to r.last are in deleted segments and
			// must be compacted away by the records that follow.
			st.dummyIndex, st.dummyTerm, st.last = r.dummyIndex, r.dummyTerm, r.last
			st.base, st.ents = r.last+1, nil
		}
		st.hardState, st.confState, st.confIndex, st.snap = r.hs, r.cs, r.csIndex, raftpb.EnsureSnapshot(r.snap)
	default:
		return fmt.Errorf("unknown record type %d", typ)
	}
	return nil
}

func (st *walState) installSnapshot(snap *raftpb.Snapshot) {
	st.snap, st.confState, st.confIndex = snap, nil, 0
	st.dummyIndex, st.dummyTerm = snap.GetMetadata().GetIndex(), snap.GetMetadata().GetTerm()
	st.last, st.base, st.ents = st.dummyIndex, st.dummyIndex+1, nil
}

// skipEntry is appendEntry for entry i below the replay floor: it drops
// entries >= i and holds nothing for i, so that entries (dummyIndex, i] are
// missing until a compaction passes them, as entries of deleted segments
// are. Replaying a segment of dead history then costs no memory per entry.
func (st *walState) skipEntry(i uint64) error {
	if i <= st.dummyIndex || i > st.last+1 {
		return fmt.Errorf("entry %d outside (%d, %d]", i, st.dummyIndex, st.last+1)
	}
	st.base, st.ents, st.last = i+1, nil, i
	return nil
}

// appendEntry drops entries >= i and appends e, entry i.
func (st *walState) appendEntry(i uint64, e *raftpb.Entry) error {
	if i <= st.dummyIndex || i > st.last+1 {
		return fmt.Errorf("entry %d outside (%d, %d]", i, st.dummyIndex, st.last+1)
	}
	if i < st.base {
		st.base, st.ents = i, nil
	} else {
		st.ents = st.ents[:i-st.base]
	}
	st.ents = append(st.ents, e)
	st.last = i
	return nil
}

func (st *walState) compact(index, term uint64) error {
	if index < st.dummyIndex || index > st.last {
		return fmt.Errorf("compact %d outside [%d, %d]", index, st.dummyIndex, st.last)
	}
	st.dummyIndex, st.dummyTerm = index, term
	if index+1 > st.base {
		drop := min(index+1-st.base, uint64(len(st.ents)))
		st.ents = append([]*raftpb.Entry(nil), st.ents[drop:]...)
		st.base = index + 1
	}
	return nil
}

// settled reports whether replay kept its floor's promise: every entry held
// was decoded.
func (st *walState) settled() bool {
	return !st.skipped || (st.dummyIndex >= st.floor && !slices.Contains(st.ents, nil))
}

// entryIndex reads an encoded raftpb.Entry's index without decoding the rest.
func entryIndex(b []byte) (uint64, bool) {
	var index uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
		if num == 3 && typ == protowire.VarintType { // raftpb.Entry.Index
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return 0, false
			}
			index, b = v, b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return 0, false
		}
		b = b[m:]
	}
	return index, index > 0
}

// entry returns entry i, which must be in (dummyIndex, last].
func (st *walState) entry(i uint64) *raftpb.Entry {
	return st.ents[i-st.base]
}
