package simnet

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/transport/transportpb"
)

// linkScenario runs three endpoints on a lossy, reordering network: one
// goroutine per link sends raft messages at random instants of a coarse
// grid (so that many land on the same instant) and now and then a snapshot
// or a call, while the links are partitioned, healed and blocked. It
// returns the trace.
func linkScenario(t *testing.T, seed uint64) (hash uint64, events []Event) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		n := New(seed,
			WithPolicy(Policy{Drop: 0.1, Duplicate: 0.05, Reorder: 0.2, MinDelay: time.Millisecond, MaxDelay: 8 * time.Millisecond}),
			WithTrace(func(ev Event) { events = append(events, ev) }))
		defer n.Close()
		nodes := cluster(t, n, 3)
		for _, nd := range nodes {
			writeSnap(t, nd, 100, "snapshot")
		}
		var wg sync.WaitGroup
		for from := uint64(1); from <= 3; from++ {
			for to := uint64(1); to <= 3; to++ {
				if from == to {
					continue
				}
				wg.Go(func() {
					r := rand.New(rand.NewPCG(seed, from<<8|to))
					for i := uint64(1); i <= 60; i++ {
						time.Sleep(time.Duration(r.IntN(4)) * time.Millisecond)
						nodes[from].ep.Send([]*raftpb.Message{app(from, to, i)})
						switch i % 20 {
						case 0:
							ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
							_, _ = nodes[from].ep.Keepalive(ctx, to, &transportpb.KeepaliveRequest{Session: i})
							cancel()
						case 7:
							nodes[from].ep.Send([]*raftpb.Message{snapMsg(from, to, 100)})
						}
					}
				})
			}
		}
		time.Sleep(30 * time.Millisecond)
		n.Partition([]uint64{1}, []uint64{2, 3})
		time.Sleep(30 * time.Millisecond)
		n.Heal()
		n.Block(2, 3)
		time.Sleep(20 * time.Millisecond)
		n.Heal()
		wg.Wait()
		time.Sleep(time.Second)
		hash = n.TraceHash()
	})
	return hash, events
}

// loopNode plays a node: Receive and Keepalive hand their work to one
// loop goroutine, which also ticks and is the only one to Send. Every
// message it sends carries its count of what it has handled, so the trace
// shows the order in which the loop took its inputs, which a Go select
// picks at random among the ready ones: only if the network hands a node
// one thing at a time, once the node is quiet, is that order the seed's.
type loopNode struct {
	*recorder
	ep    *Endpoint
	peers []uint64
	recvc chan []*raftpb.Message
	callc chan chan uint64
	stop  chan struct{}
	done  chan struct{}
}

func newLoopNode(rec *recorder, peers []uint64) *loopNode {
	return &loopNode{recorder: rec, peers: peers, recvc: make(chan []*raftpb.Message, 1024),
		callc: make(chan chan uint64), stop: make(chan struct{}), done: make(chan struct{})}
}

func (l *loopNode) Receive(msgs []*raftpb.Message) {
	l.recorder.Receive(msgs)
	l.recvc <- msgs
}

func (l *loopNode) Keepalive(ctx context.Context, from uint64, req *transportpb.KeepaliveRequest) (*transportpb.KeepaliveResponse, error) {
	answer := make(chan uint64, 1)
	select {
	case l.callc <- answer:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &transportpb.KeepaliveResponse{Status: transportpb.KeepaliveStatus(<-answer % 3)}, nil
}

func (l *loopNode) loop() {
	defer close(l.done)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var count uint64
	id := l.recorder.ID
	for {
		var out []*raftpb.Message
		select {
		case <-l.stop:
			return
		case msgs := <-l.recvc:
			for _, m := range msgs {
				if m.GetType() == raftpb.MessageType_MsgApp {
					count++
					r := msg(raftpb.MessageType_MsgAppResp, id, m.GetFrom())
					r.Index = proto.Uint64(count)
					out = append(out, r)
				}
			}
		case <-tick.C:
			count++
			out = append(out, app(id, l.peers[count%2], count))
		case a := <-l.callc:
			count++
			a <- count
			hb := msg(raftpb.MessageType_MsgHeartbeat, id, l.peers[0])
			hb.Index = proto.Uint64(count)
			out = append(out, hb)
		}
		l.ep.Send(out)
	}
}

// loopScenario runs three loopNodes that tick at the same instants, a ring
// of links without any delay and the others with random ones, while one
// goroutine per pair of nodes calls at random instants of the ticks' grid.
// Without the settling (Settle) it is a different trace nearly every run.
// It returns the trace.
func loopScenario(t *testing.T, seed uint64) (hash uint64, events []Event) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		n := New(seed,
			WithPolicy(Policy{Drop: 0.05, Reorder: 0.2, MaxDelay: 2 * time.Millisecond}),
			WithTrace(func(ev Event) { events = append(events, ev) }))
		defer n.Close()
		n.SetLinkPolicy(1, 2, Policy{})
		n.SetLinkPolicy(2, 3, Policy{})
		n.SetLinkPolicy(3, 1, Policy{Drop: 0.1})
		nodes := make(map[uint64]*node)
		var loops []*loopNode
		for id := uint64(1); id <= 3; id++ {
			rec := &recorder{ID: id}
			var peers []uint64
			for p := uint64(1); p <= 3; p++ {
				if p != id {
					peers = append(peers, p)
				}
			}
			l := newLoopNode(rec, peers)
			cfg := config(t, id, rec)
			cfg.Handler = l
			tn, err := n.Start(cfg)
			if err != nil {
				t.Fatal(err)
			}
			l.ep = tn.(*Endpoint)
			loops = append(loops, l)
			nodes[id] = &node{ep: l.ep, rec: rec, dir: cfg.SnapshotDir}
		}
		connect(nodes)
		for _, l := range loops {
			go l.loop()
		}
		var wg sync.WaitGroup
		for from := uint64(1); from <= 3; from++ {
			for to := uint64(1); to <= 3; to++ {
				if from != to {
					wg.Go(func() {
						r := rand.New(rand.NewPCG(seed, from<<8|to))
						for i := uint64(1); i <= 20; i++ {
							time.Sleep(time.Duration(r.IntN(5)) * time.Millisecond)
							_, _ = nodes[from].ep.Keepalive(t.Context(), to, &transportpb.KeepaliveRequest{Session: i})
						}
					})
				}
			}
		}
		wg.Wait()
		for _, l := range loops {
			close(l.stop)
			<-l.done
		}
		time.Sleep(time.Second)
		hash = n.TraceHash()
	})
	return hash, events
}

// sameTrace fails unless two traces are equal, naming the first
// difference.
func sameTrace(t *testing.T, what string, h1 uint64, ev1 []Event, h2 uint64, ev2 []Event) {
	t.Helper()
	for i := range min(len(ev1), len(ev2)) {
		if ev1[i] != ev2[i] {
			t.Fatalf("%s differs at event %d of %d:\n  first: %v\n  now:   %v", what, i, len(ev1), ev1[i], ev2[i])
		}
	}
	if h1 != h2 || len(ev1) != len(ev2) {
		t.Fatalf("%s: hash %x after %d events, first run %x after %d", what, h2, len(ev2), h1, len(ev1))
	}
}

func TestSameSeedSameTrace(t *testing.T) {
	const seed = 20240601
	t.Logf("seed %d", seed)
	scenarios := []struct {
		name  string
		run   func(*testing.T, uint64) (uint64, []Event)
		kinds []Kind
	}{
		{"link goroutines", linkScenario,
			[]Kind{Delivered, Dropped, Unreachable, SnapshotArrived, SnapshotReported, CallArrived, CallReturned}},
		{"node loops", loopScenario, []Kind{Delivered, Dropped, CallArrived, CallReturned}},
	}
	for _, sc := range scenarios {
		h1, ev1 := sc.run(t, seed)
		for run := 2; run <= 3; run++ {
			h, ev := sc.run(t, seed)
			sameTrace(t, fmt.Sprintf("%s, run %d", sc.name, run), h1, ev1, h, ev)
		}
		kinds := make(map[Kind]int)
		for _, ev := range ev1 {
			kinds[ev.Kind]++
		}
		t.Logf("%s: %d events, hash %x, by kind %v", sc.name, len(ev1), h1, kinds)
		for _, k := range sc.kinds {
			if kinds[k] == 0 {
				t.Errorf("%s never produced a %v event", sc.name, k)
			}
		}
		if h, _ := sc.run(t, seed+1); h == h1 {
			t.Fatalf("%s: seeds %d and %d gave the same trace %x", sc.name, seed, seed+1, h1)
		}
	}
}

func TestFakeTimeAdvancesByTheDelays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, nodes := newCluster(t, 1, 3, WithPolicy(Policy{MinDelay: 5 * time.Millisecond, MaxDelay: 5 * time.Millisecond}))
		sent := time.Now()
		nodes[1].ep.Send([]*raftpb.Message{app(1, 2, 1), app(1, 2, 2)})
		nodes[3].ep.Send([]*raftpb.Message{app(3, 2, 1)})
		time.Sleep(10 * time.Millisecond)
		b := nodes[2].rec.Batches()
		if len(b) != 2 || len(b[0].Msgs) != 2 || b[0].Msgs[0].GetFrom() != 1 || b[1].Msgs[0].GetFrom() != 3 {
			t.Fatalf("want 1's two messages in one batch, then 3's: %d batches", len(b))
		}
		// Due at the same instant: executed a Settle apart, 1's first.
		if d0, d1 := b[0].At.Sub(sent), b[1].At.Sub(sent); d0 != 5*time.Millisecond+Settle || d1 != 5*time.Millisecond+2*Settle {
			t.Fatalf("delivered after %v and %v, want 5ms plus one and two settles", d0, d1)
		}

		began := time.Now()
		if _, err := nodes[1].ep.Keepalive(t.Context(), 2, &transportpb.KeepaliveRequest{}); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(began); d != 10*time.Millisecond+2*Settle {
			t.Fatalf("a call took %v, want 10ms plus two settles", d)
		}

		// Random delays stay within the policy's bounds.
		n.SetPolicy(Policy{MinDelay: time.Millisecond, MaxDelay: 9 * time.Millisecond, Reorder: 1})
		at := make(map[uint64]time.Time)
		for i := uint64(1); i <= 100; i++ {
			at[i] = time.Now()
			nodes[3].ep.Send([]*raftpb.Message{app(3, 1, i)})
			time.Sleep(time.Duration(i%3) * time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
		for _, b := range nodes[1].rec.Batches() {
			for _, m := range b.Msgs {
				if d := b.At.Sub(at[m.GetIndex()]); d < time.Millisecond || d > 9*time.Millisecond+100*Settle {
					t.Fatalf("message %d took %v, want within [1ms, 9ms] plus settles", m.GetIndex(), d)
				}
			}
		}
	})
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	// synctest.Test fails if a goroutine of the bubble outlives it: close
	// the endpoints and the network while calls, snapshots and messages
	// are on the way and handlers are blocked.
	synctest.Test(t, func(t *testing.T) {
		n := New(8, WithPolicy(Policy{MinDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond}))
		nodes := cluster(t, n, 3)
		block := make(chan struct{})
		nodes[2].rec.ReceiveSnap = func(ctx context.Context, _ *raftpb.Message, _ string) error {
			<-ctx.Done()
			return ctx.Err()
		}
		nodes[3].rec.Call = nil
		writeSnap(t, nodes[1], 3, "x")
		nodes[1].ep.Send([]*raftpb.Message{snapMsg(1, 2, 3), app(1, 3, 1)})
		go func() { _, _ = nodes[1].ep.Keepalive(context.Background(), 3, &transportpb.KeepaliveRequest{}) }()
		go func() { _, _ = nodes[2].ep.Keepalive(context.Background(), 1, &transportpb.KeepaliveRequest{}) }()
		n.Pause(3)
		time.Sleep(5 * time.Millisecond)
		close(block)
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Start(config(t, 5, &recorder{})); err == nil {
			t.Fatal("Start after Close succeeded")
		}
	})
}
