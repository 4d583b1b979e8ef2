package transport

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/transport/transportpb"
)

// The memory attack of an insider
//
// A certificate of the cluster that is not a member (or a light member's)
// opens 4 connections with 16 streams each and sends large batches on all
// of them for a few seconds. Before admission this drove a node's heap from
// 3 MiB to a 2 GiB peak (4 MiB of two-byte entries decode to 240 MiB, and
// nothing bounded how many were decoded at once). The node's heap must
// grow by at most 64 MiB, and a member's raft messages and calls must keep
// being served meanwhile.
//
//	go test -run TestAttackMemoryBounded -v ./transport/
//
// The attacker runs in this process but its batches are encoded once and
// sent from one shared buffer (rawCodec), so what grows is the victim's.

const (
	attackConns   = 4
	attackStreams = 16
	attackFor     = 3 * time.Second
	attackMaxHeap = 64 << 20
)

// rawCodec sends pre-encoded bytes as they are and ignores answers.
type rawCodec struct{}

type wireBytes struct{ b []byte }

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(*wireBytes).b)}, nil
}
func (rawCodec) Unmarshal(mem.BufferSlice, any) error { return nil }

var _ encoding.CodecV2 = rawCodec{}

// amplifiedBatch is 4 MiB of empty entries: the largest decoding before
// the limits (limits.go).
func amplifiedBatch() []byte {
	msg := make([]byte, 0, 128<<10)
	for len(msg)+2 <= 128<<10 {
		msg = append(msg, 0x3a, 0x00)
	}
	var b []byte
	for len(b)+len(msg)+8 <= 4<<20 {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, msg)
	}
	return b
}

// heaviestBatch is the batch that decodes to the most within the limits:
// maxBatchEntries entries of the fewest bytes the ratio allows.
func heaviestBatch(from, to uint64) []byte {
	m := msgApp(from, to, 1)
	for i := range maxMsgEntries / 4 {
		m.Entries = append(m.Entries, &raftpb.Entry{Term: new(uint64(1)), Index: new(uint64(i + 1)),
			Type: raftpb.EntryType_EntryNormal.Enum()})
	}
	raw, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	var b []byte
	for range 4 {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, raw)
	}
	return b
}

// callFlood is a FwdPropose of 4 MiB less a little.
func callFlood() []byte {
	req := &transportpb.FwdProposeRequest{Commands: [][]byte{make([]byte, 4<<20-(64<<10))}}
	b, err := proto.Marshal(req)
	if err != nil {
		panic(err)
	}
	return b
}

// victim is a member's handler as a node's is: it drops at once what comes
// from a non-member, and serves its members.
type victim struct {
	recorder
	members  map[uint64]bool
	received atomic.Int64 // raft messages from members
	dropped  atomic.Int64 // raft messages from others
}

func (v *victim) Receive(msgs []*raftpb.Message) {
	if v.members[msgs[0].GetFrom()] {
		v.received.Add(int64(len(msgs)))
	} else {
		v.dropped.Add(int64(len(msgs)))
	}
}

// heapBytes is the heap's objects, live and not yet collected.
func heapBytes(s []metrics.Sample) uint64 {
	metrics.Read(s)
	return s[0].Value.Uint64()
}

type attack struct {
	name string
	// role of the attacker's certificate; id 99 is never a member.
	role string
	id   uint64
	// admitRaft: the victim admits raft traffic only from members (what the
	// node does); false: from any voter (the worst case for decoding).
	admitRaft bool
	method    string
	payload   func() []byte
}

func TestAttackMemoryBounded(t *testing.T) {
	for _, at := range []attack{
		{name: "non-member batches", role: "voter", id: 99, admitRaft: true,
			method: transportpb.Raft_Stream_FullMethodName, payload: amplifiedBatch},
		{name: "light member batches", role: "light", id: 5, admitRaft: true,
			method: transportpb.Raft_Stream_FullMethodName, payload: amplifiedBatch},
		{name: "voter non-member batches, admitted", role: "voter", id: 99,
			method: transportpb.Raft_Stream_FullMethodName, payload: func() []byte { return heaviestBatch(99, 1) }},
		{name: "light member calls", role: "light", id: 5, admitRaft: true,
			method: transportpb.Raft_FwdPropose_FullMethodName, payload: callFlood},
	} {
		t.Run(at.name, func(t *testing.T) { runAttack(t, at) })
	}
}

func runAttack(t *testing.T, at attack) {
	p := newPKI(t)
	v := &victim{members: map[uint64]bool{1: true, 2: true}}
	v.Call = func(ctx context.Context, from uint64, _ string, _ proto.Message) (proto.Message, error) {
		if !v.members[from] {
			return nil, fmt.Errorf("%w: not a member", ErrPermissionDenied)
		}
		return &transportpb.KeepaliveResponse{}, nil
	}
	a := newNode(t, "c1", 1, withTLS(p.member("c1", 1)), func(c *Config) {
		c.Handler = v
		if at.admitRaft {
			c.AdmitRaft = func(from uint64) bool { return v.members[from] }
		}
	})
	member := newNode(t, "c1", 2, withTLS(p.member("c1", 2)))
	connect(a, member)
	attacker := p.memberRole("c1", at.id, at.role)
	payload := &wireBytes{at.payload()}

	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	runtime.GC()
	base := heapBytes(samples)

	ctx, stop := context.WithTimeout(context.Background(), attackFor)
	defer stop()
	var wg sync.WaitGroup
	var sent, opened atomic.Int64
	for range attackConns {
		c := dialRaw(t, a.t.Addr(), attacker, "c1", at.id, grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
		sctx := metadataFrom(c.ctx, ctx)
		for range attackStreams {
			wg.Go(func() {
				for sctx.Err() == nil {
					opened.Add(1)
					s, err := c.conn.NewStream(sctx, &grpc.StreamDesc{ClientStreams: true}, at.method)
					if err != nil {
						continue
					}
					for s.SendMsg(payload) == nil {
						sent.Add(1)
						if at.method != transportpb.Raft_Stream_FullMethodName {
							break
						}
					}
					_ = s.CloseSend()
					_ = s.RecvMsg(&wireBytes{})
				}
			})
		}
	}

	// The member keeps sending and calling; the heap is sampled.
	var peak atomic.Uint64
	var served, failed atomic.Int64
	var slowest atomic.Int64
	wg.Go(func() {
		for i := uint64(1); ctx.Err() == nil; i++ {
			member.t.Send([]*raftpb.Message{msgApp(2, 1, i)})
			start := time.Now()
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := member.t.Keepalive(cctx, 1, &transportpb.KeepaliveRequest{})
			cancel()
			if err != nil {
				failed.Add(1)
			} else {
				served.Add(1)
			}
			if d := int64(time.Since(start)); d > slowest.Load() {
				slowest.Store(d)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	wg.Go(func() {
		for ctx.Err() == nil {
			if h := heapBytes(samples); h > peak.Load() {
				peak.Store(h)
				if h > base+2*attackMaxHeap {
					stop() // failed already: spare the machine the rest
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	wg.Wait()

	growth := int64(peak.Load()) - int64(base)
	t.Logf("%s: heap %d MiB before, peak %d MiB (+%d MiB) over %v; attacker: %d streams opened, %d messages sent; "+
		"member: %d raft messages received, %d calls served, %d failed, slowest %v; victim dropped %d non-member messages",
		at.name, base>>20, peak.Load()>>20, growth>>20, attackFor, opened.Load(), sent.Load(),
		v.received.Load(), served.Load(), failed.Load(), time.Duration(slowest.Load()).Round(time.Millisecond), v.dropped.Load())
	require.LessOrEqual(t, growth, int64(attackMaxHeap), "heap growth under attack")
	require.Zero(t, failed.Load(), "the member's calls failed")
	require.Greater(t, served.Load(), int64(5), "the member's calls were served")
	require.Greater(t, v.received.Load(), int64(5), "the member's raft messages arrived")
	require.Less(t, time.Duration(slowest.Load()), 2*time.Second, "the member waited")
}

// metadataFrom is ctx with withMD's outgoing headers.
func metadataFrom(withMD, ctx context.Context) context.Context {
	md, _ := metadata.FromOutgoingContext(withMD)
	return metadata.NewOutgoingContext(ctx, md)
}
