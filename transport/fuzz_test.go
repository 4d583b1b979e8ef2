package transport

import (
	"crypto/sha256"
	"encoding/binary"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/internal/netrules"
	"github.com/lockraft/lockraft/internal/refuse"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// Fuzz targets for everything the transport decodes from the network (see
// the package doc for how to run them longer). Their seed corpora are in
// testdata/fuzz/<Target>; go test runs every seed.

// FuzzStreamBatch: a batch as the message stream receives it: the limit
// check, the Batch itself, the batch's announced cost, each message, and the
// filter. Nothing panics; a message the filter passes is addressed here,
// from the peer, and of a type a peer may send; the batch never decodes to
// more entries than it announced.
func FuzzStreamBatch(f *testing.F) {
	c := batchFuzzSeeds(f)
	batch := &transportpb.Batch{} // reused, as Stream does
	f.Fuzz(func(t *testing.T, b []byte) {
		if c.decodeBatch(b, batch) != nil {
			return
		}
		wire, entries := 0, 0
		for _, raw := range batch.GetMsgs() {
			wire += len(raw)
			entries += countEntries(raw)
		}
		if entries > maxBatchEntries || decodeAmplified(wire, len(batch.GetMsgs()), entries) {
			return // refused whole, as Stream does
		}
		for _, raw := range batch.GetMsgs() {
			m, err := decodeMessage(raw)
			if err != nil {
				continue
			}
			entries -= len(m.GetEntries())
			if ok, _ := netrules.RemoteMessageOK(m, 2, 1); ok {
				require.Equal(t, uint64(2), m.GetTo())
				require.Equal(t, uint64(1), m.GetFrom())
				require.NotEqual(t, raftpb.MessageType_MsgSnap, m.GetType())
				require.Empty(t, m.GetResponses())
			}
		}
		require.GreaterOrEqual(t, entries, 0)
	})
}

// batchFuzzSeeds adds a batch of each decode sample, twice over, to f's
// corpus, and returns a codec for the stream's batches.
func batchFuzzSeeds(f *testing.F) codec {
	for _, m := range decodeSamples() {
		raw, err := proto.Marshal(m)
		require.NoError(f, err)
		b, err := proto.Marshal(&transportpb.Batch{Msgs: [][]byte{raw, raw}})
		require.NoError(f, err)
		f.Add(b)
	}
	return newCodec(refuse.New(slog.New(slog.DiscardHandler), time.Minute))
}

// FuzzSnapshotHeader: the first chunk of a snapshot transfer. A header that
// passes is a MsgSnap from the sender to this node with metadata and an
// announced size within the limit.
func FuzzSnapshotHeader(f *testing.F) {
	for _, m := range []*raftpb.Message{msgSnapSample(1, 2, 9), msgSnapSample(1, 3, 9), {}} {
		raw, _ := proto.Marshal(m)
		b, _ := proto.Marshal(&transportpb.SnapshotChunk{Message: raw, Size: 1 << 20, Data: []byte("abc")})
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c := &transportpb.SnapshotChunk{}
		if proto.Unmarshal(b, c) != nil {
			return
		}
		m, err := checkSnapshotHeader(c, 2, 1, 1<<30)
		if err != nil {
			return
		}
		require.Equal(t, raftpb.MessageType_MsgSnap, m.GetType())
		require.Equal(t, uint64(2), m.GetTo())
		require.Equal(t, uint64(1), m.GetFrom())
		require.NotZero(t, m.GetSnapshot().GetMetadata().GetIndex())
		require.LessOrEqual(t, c.GetSize(), uint64(1<<30))
	})
}

func msgSnapSample(from, to, index uint64) *raftpb.Message {
	return &raftpb.Message{Type: raftpb.MessageType_MsgSnap.Enum(), From: new(from), To: new(to), Term: new(uint64(3)),
		Snapshot: &raftpb.Snapshot{Data: []byte("d"), Metadata: &raftpb.SnapshotMetadata{Index: new(index),
			Term: new(uint64(3)), ConfState: &raftpb.ConfState{Voters: []uint64{1, 2}}}}}
}

// FuzzSnapshotChunks: a sequence of chunks (each a length-prefixed marshalled
// SnapshotChunk after an 8-byte announced size). The receiver never accepts
// more bytes than announced, and accepts a last chunk only when the size and
// the SHA-256 of everything received match.
func FuzzSnapshotChunks(f *testing.F) {
	good := func(data []byte, split int) []byte {
		sum := sha256.Sum256(data)
		out := binary.BigEndian.AppendUint64(nil, uint64(len(data)))
		for _, c := range []*transportpb.SnapshotChunk{{Data: data[:split]}, {Data: data[split:], Last: true, Sha256: sum[:]}} {
			raw, _ := proto.Marshal(c)
			out = binary.AppendUvarint(out, uint64(len(raw)))
			out = append(out, raw...)
		}
		return out
	}
	f.Add(good([]byte("hello snapshot"), 5))
	f.Add(good(nil, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 8 {
			return
		}
		r := newChunkReceiver(binary.BigEndian.Uint64(b))
		b = b[8:]
		var all []byte
		for len(b) > 0 {
			l, k := binary.Uvarint(b)
			if k <= 0 || l > uint64(len(b)-k) {
				return
			}
			c := &transportpb.SnapshotChunk{}
			if proto.Unmarshal(b[k:k+int(l)], c) != nil {
				return
			}
			b = b[k+int(l):]
			data, last, err := r.add(c)
			if err != nil {
				return
			}
			all = append(all, data...)
			require.LessOrEqual(t, uint64(len(all)), r.want)
			if last {
				sum := sha256.Sum256(all)
				require.Equal(t, r.want, uint64(len(all)))
				require.Equal(t, sum[:], c.GetSha256())
				return
			}
		}
	})
}

// fuzzRequest is the decoding a typed call's message gets on arrival: the
// limit check, then proto. Whatever decodes re-encodes and decodes equal.
func fuzzRequest[T proto.Message](f *testing.F, newT func() T, seeds ...T) {
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m := newT()
		if max := limitOf(m); max > 0 && checkRepeated(b, max) != nil {
			return
		}
		if proto.Unmarshal(b, m) != nil {
			return
		}
		again, err := proto.Marshal(m)
		require.NoError(t, err)
		m2 := newT()
		require.NoError(t, proto.Unmarshal(again, m2))
		require.True(t, proto.Equal(m, m2))
	})
}

func FuzzCallKeepalive(f *testing.F) {
	fuzzRequest(f, func() *transportpb.KeepaliveRequest { return &transportpb.KeepaliveRequest{} },
		&transportpb.KeepaliveRequest{Session: 42})
}

func FuzzCallRenew(f *testing.F) {
	fuzzRequest(f, func() *transportpb.RenewRequest { return &transportpb.RenewRequest{} },
		&transportpb.RenewRequest{Name: "stock/sku-42", Token: 7},
		&transportpb.RenewRequest{Name: "stock/sku-42", Token: 7, Session: 5, Owner: []byte("reader-1")})
}

func FuzzCallRemoved(f *testing.F) {
	fuzzRequest(f, func() *transportpb.RemovedRequest { return &transportpb.RemovedRequest{} },
		&transportpb.RemovedRequest{Term: 3, Applied: 99, Voters: []uint64{1, 2, 3}, Learners: []uint64{4}})
}

func FuzzCallLeave(f *testing.F) {
	fuzzRequest(f, func() *transportpb.LeaveRequest { return &transportpb.LeaveRequest{} }, &transportpb.LeaveRequest{})
}

func FuzzCallFwdOpen(f *testing.F) {
	fuzzRequest(f, func() *transportpb.FwdOpenRequest { return &transportpb.FwdOpenRequest{} },
		&transportpb.FwdOpenRequest{Nonce: 5, TtlMillis: 10000})
}

func FuzzCallFwdPropose(f *testing.F) {
	fuzzRequest(f, func() *transportpb.FwdProposeRequest { return &transportpb.FwdProposeRequest{} },
		&transportpb.FwdProposeRequest{Commands: [][]byte{{1, 5, 3, 7}, nil}})
}

func FuzzCallFwdPush(f *testing.F) {
	fuzzRequest(f, func() *transportpb.FwdPushRequest { return &transportpb.FwdPushRequest{} },
		&transportpb.FwdPushRequest{Items: []*transportpb.PushItem{
			{Item: &transportpb.PushItem_Result{Result: &transportpb.PushResult{Kind: 5, Session: 3, Seq: 1, Status: 1, Token: 9}}},
			{Item: &transportpb.PushItem_Event{Event: &transportpb.PushEvent{Kind: 1, Session: 3, Name: "n", Owner: "o"}}}}},
		&transportpb.FwdPushRequest{Items: []*transportpb.PushItem{
			{Item: &transportpb.PushItem_Event{Event: &transportpb.PushEvent{Kind: 1, Session: 3, Name: "a", Owner: "o",
				Permits: 2, Mode: 1, ExtraNames: []string{"b", "c"}}}},
			{Item: &transportpb.PushItem_LeaderChange{LeaderChange: &transportpb.LeaderChangePush{Name: "e", Prev: 4,
				Change: &transportpb.ElectionState{Index: 9, Session: 3, Owner: []byte("o"), Token: 9, Value: []byte("v")}}}}}})
}

func FuzzCallFwdStatus(f *testing.F) {
	fuzzRequest(f, func() *transportpb.FwdStatusRequest { return &transportpb.FwdStatusRequest{} },
		&transportpb.FwdStatusRequest{Session: 3, Queries: []*transportpb.StatusQuery{{Seq: 1, Name: "n", Owner: "o"}}})
}

func FuzzCallObserve(f *testing.F) {
	fuzzRequest(f, func() *transportpb.ObserveRequest { return &transportpb.ObserveRequest{} },
		&transportpb.ObserveRequest{Names: []*transportpb.ObserveName{{Name: "leader/orders", After: 12}, {Name: "e"}}})
}

// FuzzCallReplies: the replies a caller decodes (a node answering a call
// may be the one lying).
func FuzzCallInspect(f *testing.F) {
	fuzzRequest(f, func() *transportpb.InspectRequest { return &transportpb.InspectRequest{} },
		&transportpb.InspectRequest{Op: transportpb.InspectOp_INSPECT_OP_LOCKS, Prefix: "stock/", After: "stock/a", Limit: 50})
}

func FuzzCallForm(f *testing.F) {
	fuzzRequest(f, func() *transportpb.FormRequest { return &transportpb.FormRequest{} },
		&transportpb.FormRequest{Formation: "aaaa", Candidate: "a-1", Founders: []string{"a-1", "a-2", "a-3"}, Target: "a-2", TargetId: 7})
}

func FuzzCallReplies(f *testing.F) {
	fuzzRequest(f, func() *transportpb.FwdProposeResponse { return &transportpb.FwdProposeResponse{} },
		&transportpb.FwdProposeResponse{NotLeader: &transportpb.LeaderHint{Leader: 3}},
		&transportpb.FwdProposeResponse{Items: []*transportpb.PushItem{
			{Item: &transportpb.PushItem_Result{Result: &transportpb.PushResult{Kind: 5, Session: 3, Seq: 1}}}}})
}

func FuzzCallObserveReplies(f *testing.F) {
	fuzzRequest(f, func() *transportpb.ObserveResponse { return &transportpb.ObserveResponse{} },
		&transportpb.ObserveResponse{NotLeader: &transportpb.LeaderHint{Leader: 3}},
		&transportpb.ObserveResponse{Elections: []*transportpb.ObservedElection{{Current: true, Chain: 9,
			Changes: []*transportpb.ElectionState{{Index: 9, Session: 3, Owner: []byte("o"), Token: 9, Value: []byte("v")}}}}})
}
