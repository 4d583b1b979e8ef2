package transport

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

// heapAfterGC is the live heap, in bytes, after a full collection.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestIdleStreamKeepsNothingSent (a replica's memory; a fleet's
// leader must not grow while idle): gRPC keeps every message sent on a
// client stream for a transparent retry until the stream is committed,
// which a raft stream, answered by nothing until it ends, only was after
// 256 KiB of messages — some 10,000 heartbeats, half an hour and more per
// follower at five a second, about 300 bytes of heap each. Here 8,000
// heartbeats go out one gRPC message at a time (each waits for the last to
// arrive, so none coalesce) and the sender's live heap must not grow with
// them. Without noReplay it grew by 1.8 MB for 6,000.
func TestIdleStreamKeepsNothingSent(t *testing.T) {
	a, b := newNode(t, "c1", 1), newNode(t, "c1", 2)
	connect(a, b)
	arrived := make(chan struct{}, 1)
	b.rec.OnReceive = func([]*raftpb.Message) {
		select {
		case arrived <- struct{}{}:
		default:
		}
	}
	hb := func() []*raftpb.Message {
		return []*raftpb.Message{{Type: raftpb.MessageType_MsgHeartbeat.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(3))}}
	}
	send := func(n int) {
		for i := range n {
			a.t.Send(hb())
			select {
			case <-arrived:
			case <-time.After(waitFor):
				t.Fatalf("heartbeat %d did not arrive", i)
			}
		}
		b.rec.ForgetBatches() // the receiver's record is not what is measured
	}
	send(10) // the stream is open
	before := heapAfterGC()
	const n = 8000
	send(n)
	after := heapAfterGC()
	grew := int64(after) - int64(before)
	t.Logf("live heap %d → %d bytes (%+d) over %d heartbeats sent one message each", before, after, grew, n)
	require.Less(t, grew, int64(512<<10), "the sender's heap grew with what it sent: the stream keeps its messages")
}
