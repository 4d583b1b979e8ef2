package raftlog

import (
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Both engines store the ConfState of SetConfState together with the index of
// the applied entry it reflects: the ConfState's protobuf encoding followed
// by that index as a varint under confIndexField, a field number ConfState
// does not use. A reader that does not know the field (lockraft before this
// was added) keeps it as an unknown field and reads the same ConfState; a
// ConfState written by such a reader has no index (0: unknown).
const confIndexField protowire.Number = 1000

func marshalConfState(cs *raftpb.ConfState, index uint64) ([]byte, error) {
	b, err := proto.Marshal(cs)
	if err != nil {
		return nil, err
	}
	if index > 0 {
		b = protowire.AppendTag(b, confIndexField, protowire.VarintType)
		b = protowire.AppendVarint(b, index)
	}
	return b, nil
}

func unmarshalConfState(b []byte) (*raftpb.ConfState, uint64, error) {
	cs := &raftpb.ConfState{}
	if err := proto.Unmarshal(b, cs); err != nil {
		return nil, 0, err
	}
	var index uint64
	unknown := cs.ProtoReflect().GetUnknown()
	for len(unknown) > 0 {
		num, typ, n := protowire.ConsumeTag(unknown)
		if n < 0 {
			return nil, 0, fmt.Errorf("confstate: %v", protowire.ParseError(n))
		}
		unknown = unknown[n:]
		if num == confIndexField && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(unknown)
			if m < 0 {
				return nil, 0, fmt.Errorf("confstate index: %v", protowire.ParseError(m))
			}
			index, unknown = v, unknown[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, unknown)
		if m < 0 {
			return nil, 0, fmt.Errorf("confstate: %v", protowire.ParseError(m))
		}
		unknown = unknown[m:]
	}
	cs.ProtoReflect().SetUnknown(nil)
	return cs, index, nil
}

// confIndex is InitialState's ConfIndex for a stored ConfState cs (nil: none)
// with index csIndex and the snapshot snap; see [Log].
func confIndex(cs *raftpb.ConfState, csIndex uint64, snap *raftpb.Snapshot) uint64 {
	s := snap.GetMetadata().GetIndex()
	if cs == nil {
		return s
	}
	// The stored ConfState is the latest applied one, at least as new as the
	// snapshot's (a snapshot installed through Save replaces it), so it
	// reflects every change up to the snapshot too.
	return max(csIndex, s)
}
