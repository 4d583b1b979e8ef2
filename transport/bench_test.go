package transport

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/transport/transportpb"
)

// countingHandler counts received messages and lets a sender wait until
// the number in flight falls below a window.
type countingHandler struct {
	recorder
	mu       sync.Mutex
	cond     *sync.Cond
	received int
}

func (h *countingHandler) Receive(msgs []*raftpb.Message) {
	h.mu.Lock()
	h.received += len(msgs)
	h.cond.Broadcast()
	h.mu.Unlock()
}

// waitUntil blocks until at least n messages have been received.
func (h *countingHandler) waitUntil(n int) {
	h.mu.Lock()
	for h.received < n {
		h.cond.Wait()
	}
	h.mu.Unlock()
}

// BenchmarkSendReceive measures messages/s from Send on one transport to
// Receive on another over loopback gRPC, with 1 or 64 messages per Send
// (one Ready's worth to a peer). The sender keeps at most half a queue in
// flight so nothing is dropped.
func BenchmarkSendReceive(b *testing.B) {
	for _, per := range []int{1, 64} {
		b.Run(map[int]string{1: "1perSend", 64: "64perSend"}[per], func(b *testing.B) {
			h := &countingHandler{}
			h.cond = sync.NewCond(&h.mu)
			src := newNode(b, "bench", 1)
			dst := newNode(b, "bench", 2, func(c *Config) { c.Handler = h })
			connect(src, dst)

			batch := make([]*raftpb.Message, per)
			for i := range batch {
				m := msgApp(1, 2, uint64(i))
				m.Entries = []*raftpb.Entry{{Term: new(uint64(1)), Index: new(uint64(i)), Data: make([]byte, 64)}}
				batch[i] = m
			}
			const window = defaultQueueSize / 2
			b.ResetTimer()
			sent := 0
			for sent < b.N {
				src.t.Send(batch)
				sent += per
				if sent > window {
					h.waitUntil(sent - window)
				}
			}
			h.waitUntil(sent)
			b.StopTimer()
			if n := src.rec.UnreachableCount(2); n > 0 {
				b.Fatalf("%d drops", n)
			}
			b.ReportMetric(float64(sent)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// echoHandler sends every received message straight back to its sender.
type echoHandler struct {
	recorder
	t    *Transport
	back chan struct{}
}

func (h *echoHandler) Receive(msgs []*raftpb.Message) {
	if h.back != nil {
		h.back <- struct{}{}
		return
	}
	out := make([]*raftpb.Message, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, &raftpb.Message{Type: raftpb.MsgAppResp.Enum(), To: m.From, From: m.To, Index: m.Index})
	}
	h.t.Send(out)
}

// BenchmarkRoundTrip measures one raft message there and its answer back over
// loopback gRPC, one at a time: the transport's share of every commit
// (leader → follower MsgApp, follower → leader MsgAppResp), in plaintext and
// over mutual TLS.
//
//	go test -run '^$' -bench RoundTrip -benchmem ./transport/
func BenchmarkRoundTrip(b *testing.B) {
	p := newPKI(b)
	for _, mode := range []string{"plaintext", "tls"} {
		b.Run(mode, func(b *testing.B) {
			ha := &echoHandler{back: make(chan struct{}, 1)}
			hb := &echoHandler{}
			ta, tb := func(*Config) {}, func(*Config) {}
			if mode == "tls" {
				ta, tb = withTLS(p.member("bench", 1)), withTLS(p.member("bench", 2))
			}
			a := newNode(b, "bench", 1, ta, func(c *Config) { c.Handler = ha })
			bn := newNode(b, "bench", 2, tb, func(c *Config) { c.Handler = hb })
			hb.t = bn.t
			connect(a, bn)
			msg := func(i uint64) []*raftpb.Message {
				return []*raftpb.Message{{Type: raftpb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Index: new(i),
					Term: new(uint64(1)), Entries: []*raftpb.Entry{{Index: new(i), Term: new(uint64(1)), Data: make([]byte, 64)}}}}
			}
			for i := range 100 { // warm up the streams
				a.t.Send(msg(uint64(i)))
				<-ha.back
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				a.t.Send(msg(uint64(i)))
				<-ha.back
			}
		})
	}
}

// BenchmarkBatchMarshal: encoding a raft stream's Batch, by hand
// (encodeBatch, what the codec does) and through protobuf (gRPC's own
// codec), for an idle leader's heartbeat to one follower and a loaded one's
// append of 64 proposals.
func BenchmarkBatchMarshal(b *testing.B) {
	heartbeat, _ := proto.Marshal(&raftpb.Message{Type: raftpb.MessageType_MsgHeartbeat.Enum(), To: proto.Uint64(2),
		From: proto.Uint64(1), Term: proto.Uint64(7), Commit: proto.Uint64(123456)})
	app := &raftpb.Message{Type: raftpb.MessageType_MsgApp.Enum(), To: proto.Uint64(2), From: proto.Uint64(1),
		Term: proto.Uint64(7), Index: proto.Uint64(1000), LogTerm: proto.Uint64(7), Commit: proto.Uint64(999)}
	for i := range 64 {
		app.Entries = append(app.Entries, &raftpb.Entry{Term: proto.Uint64(7), Index: proto.Uint64(uint64(1001 + i)),
			Data: bytes.Repeat([]byte{byte(i)}, 60)})
	}
	appended, _ := proto.Marshal(app)
	base := encoding.GetCodecV2(grpcproto.Name)
	for _, c := range []struct {
		name string
		m    *transportpb.Batch
	}{{"heartbeat", &transportpb.Batch{Msgs: [][]byte{heartbeat}}}, {"append64", &transportpb.Batch{Msgs: [][]byte{appended}}}} {
		b.Run(c.name+"/hand", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				encodeBatch(c.m).Free()
			}
		})
		b.Run(c.name+"/proto", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				out, err := base.Marshal(c.m)
				if err != nil {
					b.Fatal(err)
				}
				out.Free()
			}
		})
	}
}

// BenchmarkKeepalive measures one keepalive to the leader and its answer,
// both ends in this process: as a call (what every keepalive was) and on
// the member's keepalive stream (keepalives.go), in plaintext and over
// mutual TLS. A fleet's leader takes one from each member per interval.
//
//	go test -run '^$' -bench Keepalive -benchmem ./transport/
func BenchmarkKeepalive(b *testing.B) {
	p := newPKI(b)
	for _, mode := range []string{"plaintext", "tls"} {
		for _, via := range []string{"call", "stream"} {
			b.Run(mode+"/"+via, func(b *testing.B) {
				ta, tb := func(*Config) {}, func(*Config) {}
				if mode == "tls" {
					ta, tb = withTLS(p.member("bench", 1)), withTLS(p.memberRole("bench", 2, "light"))
				}
				leader := newNode(b, "bench", 1, ta)
				member := newNode(b, "bench", 2, tb)
				leader.rec.KeepNoCalls = true
				connect(leader, member)
				ctx := context.Background()
				req := &transportpb.KeepaliveRequest{Session: 7}
				send := func() {
					var err error
					if via == "call" {
						_, err = invoke(member.t, ctx, 1, "Keepalive", req, transportpb.RaftClient.Keepalive)
					} else {
						_, err = member.t.Keepalive(ctx, 1, req)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				for range 100 {
					send()
				}
				b.ResetTimer()
				for range b.N {
					send()
				}
			})
		}
	}
}
