package transport

import (
	"bytes"
	"errors"
	"log/slog"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/internal/refuse"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// decodeSamples are the messages the raft loop sends, plus the corners of
// proto2 presence: fields present with zero values, empty bytes.
func decodeSamples() []*raftpb.Message {
	ent := func(typ raftpb.EntryType, term, index uint64, data []byte) *raftpb.Entry {
		return &raftpb.Entry{Type: typ.Enum(), Term: new(term), Index: new(index), Data: data}
	}
	return []*raftpb.Message{
		{},
		{Type: raftpb.MessageType_MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(7)),
			LogTerm: new(uint64(7)), Index: new(uint64(41)), Commit: new(uint64(40)),
			Entries: []*raftpb.Entry{
				ent(raftpb.EntryType_EntryNormal, 7, 42, []byte("acquire stock/sku-42")),
				ent(raftpb.EntryType_EntryNormal, 7, 43, nil),
				ent(raftpb.EntryType_EntryConfChangeV2, 7, 44, []byte{1, 2, 3}),
				{Data: []byte{}}, // present but empty data, no other field
			}},
		{Type: raftpb.MessageType_MsgApp.Enum(), To: new(uint64(3)), From: new(uint64(1)), Term: new(uint64(0)),
			Commit: new(uint64(0))}, // present zero values
		{Type: raftpb.MessageType_MsgAppResp.Enum(), To: new(uint64(1)), From: new(uint64(2)), Term: new(uint64(7)),
			Index: new(uint64(40)), Reject: new(true), RejectHint: new(uint64(12)), LogTerm: new(uint64(6))},
		{Type: raftpb.MessageType_MsgAppResp.Enum(), Reject: new(false)},
		{Type: raftpb.MessageType_MsgHeartbeat.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(7)),
			Commit: new(uint64(40)), Context: []byte("read-index-17")},
		{Type: raftpb.MessageType_MsgHeartbeatResp.Enum(), Context: []byte{}},
		{Type: raftpb.MessageType_MsgVote.Enum(), Term: new(uint64(8)), LogTerm: new(uint64(7)), Index: new(uint64(44)),
			Vote: new(uint64(0))},
		{Type: raftpb.MessageType_MsgProp.Enum(), From: new(uint64(2)), To: new(uint64(1)),
			Entries: []*raftpb.Entry{{Data: []byte("release")}, {Data: []byte("acquire")}}},
		// Decoded by proto.Unmarshal: a snapshot, responses.
		{Type: raftpb.MessageType_MsgSnap.Enum(), Snapshot: &raftpb.Snapshot{Data: []byte("table"),
			Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(100)), Term: new(uint64(7))}}},
		{Type: raftpb.MessageType_MsgStorageAppend.Enum(), Responses: []*raftpb.Message{
			{Type: raftpb.MessageType_MsgAppResp.Enum(), To: new(uint64(1))}}},
	}
}

// TestDecodeMessageMatchesProto: every sample decodes to what proto.Unmarshal
// gives, and the common ones take the fast path.
func TestDecodeMessageMatchesProto(t *testing.T) {
	for i, want := range decodeSamples() {
		b, err := proto.Marshal(want)
		require.NoError(t, err)
		got, err := decodeMessage(b)
		require.NoError(t, err)
		require.True(t, proto.Equal(want, got), "sample %d:\nwant %v\ngot  %v", i, want, got)
		_, fast := decodeMessageFast(b)
		require.Equal(t, want.GetSnapshot() == nil && len(want.GetResponses()) == 0, fast, "sample %d fast path", i)
	}
}

// TestDecodeMessageFallsBack: what the fast path does not know (an unknown
// field, a truncated field) is left to proto.Unmarshal: kept as an unknown
// field, or an error; a message or entry type raft does not define is
// refused (TestDecodeRefusesUnknownEnums).
func TestDecodeMessageFallsBack(t *testing.T) {
	base, err := proto.Marshal(&raftpb.Message{Type: raftpb.MessageType_MsgApp.Enum(), Term: new(uint64(3))})
	require.NoError(t, err)
	cases := map[string][]byte{
		"unknown field":   protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), base...), 99, protowire.VarintType), 5),
		"wrong wire type": protowire.AppendBytes(protowire.AppendTag(nil, msgTerm, protowire.BytesType), []byte{1}),
	}
	for name, b := range cases {
		_, fast := decodeMessageFast(b)
		require.False(t, fast, name)
		want := &raftpb.Message{}
		require.NoError(t, proto.Unmarshal(b, want), name)
		got, err := decodeMessage(b)
		require.NoError(t, err, name)
		require.True(t, proto.Equal(want, got), name)
	}
	_, err = decodeMessage(base[:len(base)-1]) // truncated varint
	require.Error(t, err)
}

// A message or entry type raft does not define — 1000, 77, or negative,
// which proto.Unmarshal keeps and raft's IsLocalMsg would index an array
// with (a panic in RawNode.Step on main: one message crashed the process) —
// is refused. (S7: the loop never panics on input.)
func TestDecodeRefusesUnknownEnums(t *testing.T) {
	neg := int64(-5)
	for name, b := range map[string][]byte{
		"unknown type":  protowire.AppendVarint(protowire.AppendTag(nil, msgType, protowire.VarintType), 1000),
		"negative type": protowire.AppendVarint(protowire.AppendTag(nil, msgType, protowire.VarintType), uint64(neg)),
		"entry unknown": protowire.AppendBytes(protowire.AppendTag(nil, msgEntries, protowire.BytesType),
			protowire.AppendVarint(protowire.AppendTag(nil, entType, protowire.VarintType), 77)),
		"entry negative": protowire.AppendBytes(protowire.AppendTag(nil, msgEntries, protowire.BytesType),
			protowire.AppendVarint(protowire.AppendTag(nil, entType, protowire.VarintType), uint64(neg))),
	} {
		_, fast := decodeMessageFast(b)
		require.False(t, fast, name)
		require.NoError(t, proto.Unmarshal(b, &raftpb.Message{}), "%s: proto keeps it", name)
		_, err := decodeMessage(b)
		require.ErrorIs(t, err, errUnknownEnum, name)
	}
}

// FuzzDecodeMessage: for any input, decodeMessage fails exactly when
// proto.Unmarshal does (or when the input announces more entries than
// maxMsgEntries or than its bytes may decode to, or types raft does not
// define), and otherwise returns an equal message.
func FuzzDecodeMessage(f *testing.F) {
	for _, m := range decodeSamples() {
		b, err := proto.Marshal(m)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := &raftpb.Message{}
		werr := proto.Unmarshal(b, want)
		got, err := decodeMessage(b)
		if werr != nil {
			require.Error(t, err)
			return
		}
		if errors.Is(err, errLimit) {
			n := len(want.GetEntries())
			require.True(t, n > maxMsgEntries || decodeAmplified(len(b), 1, n), "%d entries in %d bytes", n, len(b))
			return
		}
		if errors.Is(err, errUnknownEnum) {
			require.Error(t, knownEnums(want))
			return
		}
		require.NoError(t, err)
		require.True(t, proto.Equal(want, got), "want %v\ngot  %v", want, got)
	})
}

// BenchmarkDecodeMessage: a 16-entry append, as a loaded leader sends them,
// decoded here and by proto.Unmarshal.
//
//	go test -run '^$' -bench DecodeMessage -benchmem ./transport/
func BenchmarkDecodeMessage(b *testing.B) {
	m := &raftpb.Message{Type: raftpb.MessageType_MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)),
		Term: new(uint64(7)), LogTerm: new(uint64(7)), Index: new(uint64(1000)), Commit: new(uint64(990))}
	for i := range uint64(16) {
		m.Entries = append(m.Entries, &raftpb.Entry{Term: new(uint64(7)), Index: new(1001 + i),
			Type: raftpb.EntryType_EntryNormal.Enum(), Data: make([]byte, 60)})
	}
	raw, err := proto.Marshal(m)
	require.NoError(b, err)
	b.Run("lockraft", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeMessage(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := proto.Unmarshal(raw, &raftpb.Message{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// 256 KiB on the wire cannot decode to 15 MiB: a message of 256 KiB of
// empty entries (131,072 of them, within maxMsgEntries) is refused before
// anything is allocated for them, and the message of 256 KiB that decodes
// to the most within decodeRatio (entries of a term, an index and a type:
// the smallest real ones) allocates at most decodeRatio times its bytes.
func TestDecodeOf256KiBBounded(t *testing.T) {
	const size = 256 << 10
	empty := make([]byte, 0, size)
	for len(empty)+2 <= size {
		empty = append(empty, 0x3a, 0x00)
	}
	require.LessOrEqual(t, countEntries(empty), maxMsgEntries)
	allocs := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	alloc := allocs(func() {
		_, err := decodeMessage(empty)
		require.ErrorIs(t, err, errLimit)
	})
	require.Less(t, alloc, uint64(64<<10))

	m := msgApp(1, 2, 1)
	for i := range (size - 32) / 8 { // 8 bytes an entry
		m.Entries = append(m.Entries, &raftpb.Entry{Term: new(uint64(1)), Index: new(uint64(i%100 + 1)),
			Type: raftpb.EntryType_EntryNormal.Enum()})
	}
	raw, err := proto.Marshal(m)
	require.NoError(t, err)
	alloc = allocs(func() {
		got, err := decodeMessage(raw)
		require.NoError(t, err)
		require.Len(t, got.GetEntries(), len(m.Entries))
	})
	t.Logf("256 KiB of empty entries refused; %d KiB of %d real entries decoded with %d KiB allocated",
		len(raw)>>10, len(m.Entries), alloc>>10)
	require.Less(t, alloc, uint64(decodeRatio*len(raw)+decodeSlack))
	require.Less(t, alloc, uint64(15<<20))
}

// TestDecodeBatchMatchesProto: the raft stream's Batch decoder reads what
// proto.Unmarshal reads (field 1 of the bytes wire type; unknown fields and
// a field 1 of another wire type skipped; truncation an error), and a
// reused Batch keeps nothing of the batch before.
func TestDecodeBatchMatchesProto(t *testing.T) {
	c := newCodec(refuse.New(slog.New(slog.DiscardHandler), time.Minute))
	full, err := proto.Marshal(&transportpb.Batch{Msgs: [][]byte{[]byte("one"), {}, []byte("three")}})
	require.NoError(t, err)
	cases := map[string][]byte{
		"three messages":  full,
		"empty":           nil,
		"unknown field":   protowire.AppendVarint(protowire.AppendTag(slices.Clone(full), 7, protowire.VarintType), 5),
		"wrong wire type": protowire.AppendVarint(protowire.AppendTag(slices.Clone(full), 1, protowire.VarintType), 5),
		"truncated":       full[:len(full)-1],
		"field zero":      protowire.AppendVarint(protowire.AppendTag(nil, 0, protowire.VarintType), 1),
	}
	reused := &transportpb.Batch{Msgs: [][]byte{[]byte("stale"), []byte("stale"), []byte("stale"), []byte("stale")}}
	for name, b := range cases {
		want := &transportpb.Batch{}
		wantErr := proto.Unmarshal(b, want)
		gotErr := c.decodeBatch(slices.Clone(b), reused)
		require.Equal(t, wantErr != nil, gotErr != nil, "%s: proto says %v, decodeBatch %v", name, wantErr, gotErr)
		if wantErr == nil {
			require.Equal(t, len(want.GetMsgs()), len(reused.GetMsgs()), name)
			for i := range want.GetMsgs() {
				require.Equal(t, string(want.Msgs[i]), string(reused.Msgs[i]), "%s: message %d", name, i)
			}
		}
	}
}

// TestEncodeBatchMatchesProto: the raft stream's Batch encoder writes
// proto.Marshal's bytes, for batches below and above gRPC's pooling
// threshold, and the bytes do not change when the caller reuses the batch
// and its messages afterwards.
func TestEncodeBatchMatchesProto(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 70_000) // past any pooling threshold: the pooled path
	for name, msgs := range map[string][][]byte{
		"empty":         nil,
		"one":           {[]byte("one")},
		"empty message": {{}, []byte("two")},
		"many":          slices.Repeat([][]byte{[]byte("heartbeat"), []byte("append")}, 300),
		"large":         {big, []byte("after"), big},
	} {
		m := &transportpb.Batch{Msgs: msgs}
		want, err := proto.Marshal(m)
		require.NoError(t, err)
		got := encodeBatch(m)
		flat := got.Materialize()
		for _, b := range m.Msgs {
			clear(b) // reused by the caller
		}
		require.True(t, bytes.Equal(want, flat), "%s: %d bytes, proto.Marshal %d", name, len(flat), len(want))
		got.Free()
	}
}

// FuzzDecodeBatch: for any input, decodeBatch fails exactly when
// proto.Unmarshal does, and otherwise gives the same messages, which
// encodeBatch writes as proto.Marshal does.
func FuzzDecodeBatch(f *testing.F) {
	c := batchFuzzSeeds(f)
	reused := &transportpb.Batch{}
	f.Fuzz(func(t *testing.T, b []byte) {
		if checkRepeated(b, maxBatchMsgs) != nil {
			return // refused before either decodes
		}
		want := &transportpb.Batch{}
		wantErr := proto.Unmarshal(b, want)
		gotErr := c.decodeBatch(slices.Clone(b), reused)
		require.Equal(t, wantErr != nil, gotErr != nil, "proto says %v, decodeBatch %v", wantErr, gotErr)
		if wantErr == nil {
			require.Equal(t, len(want.GetMsgs()), len(reused.GetMsgs()))
			for i := range want.GetMsgs() {
				require.Equal(t, want.Msgs[i], reused.Msgs[i], "message %d", i)
			}
			framing, err := proto.Marshal(&transportpb.Batch{Msgs: want.Msgs}) // without unknown fields
			require.NoError(t, err)
			enc := encodeBatch(reused)
			require.True(t, bytes.Equal(framing, enc.Materialize()), "encodeBatch differs from proto.Marshal")
			enc.Free()
		}
	})
}
