package simnet

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// These tests hold the simulation to the real thing: the same handlers and
// configurations over transport's gRPC transport (on loopback, in real
// time) and over a Network must give the caller the same errors, and the
// receiver the same messages and refusals.

// pair is two connected nodes, 1 calling 2, over one kind of network.
type pair struct {
	caller   transport.Network
	rec1     *recorder
	rec2     *recorder
	receiver transport.Network
}

// grpcPair starts two real transports; adjust1 and adjust2 may change
// their Configs.
func grpcPair(t *testing.T, adjust1, adjust2 func(*transport.Config)) pair {
	t.Helper()
	var p pair
	var nets [2]*transport.Transport
	for i, adjust := range []func(*transport.Config){adjust1, adjust2} {
		rec := &recorder{ID: uint64(i + 1)}
		cfg := config(t, uint64(i+1), rec)
		cfg.ListenAddr = "127.0.0.1:0"
		if adjust != nil {
			adjust(&cfg)
		}
		tr, err := transport.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close() })
		nets[i] = tr
		if i == 0 {
			p.rec1 = rec
		} else {
			p.rec2 = rec
		}
	}
	nets[0].AddPeer(2, nets[1].Addr())
	nets[1].AddPeer(1, nets[0].Addr())
	p.caller, p.receiver = nets[0], nets[1]
	return p
}

// simPair starts two endpoints of a new Network, in real time.
func simPair(t *testing.T, adjust1, adjust2 func(*transport.Config)) pair {
	t.Helper()
	n := New(1)
	t.Cleanup(func() { _ = n.Close() })
	a, b := start(t, n, 1, adjust1), start(t, n, 2, adjust2)
	a.ep.AddPeer(2, Addr(2))
	b.ep.AddPeer(1, Addr(1))
	return pair{caller: a.ep, rec1: a.rec, rec2: b.rec, receiver: b.ep}
}

// errShape is what a caller can tell of an error.
type errShape struct {
	code codes.Code
	is   string // the sentinels it wraps
	text string
}

var sentinels = []error{transport.ErrClosed, transport.ErrUnknownPeer, transport.ErrClusterMismatch,
	transport.ErrFormationMismatch, transport.ErrPermissionDenied, transport.ErrInvalidRequest,
	transport.ErrUnauthenticated, context.DeadlineExceeded, context.Canceled}

func shape(err error) errShape {
	s := errShape{code: status.Code(err)}
	if err != nil {
		s.text = err.Error()
	}
	for _, e := range sentinels {
		if errors.Is(err, e) {
			s.is += "[" + e.Error() + "]"
		}
	}
	return s
}

func TestCallErrorsMatchTheGRPCTransport(t *testing.T) {
	type setup struct {
		name             string
		adjust1, adjust2 func(*transport.Config)
		to               uint64
		handlerErr       error
		timeout          time.Duration
	}
	setups := []setup{
		{name: "answered", to: 2},
		{name: "unknown peer", to: 9},
		{name: "another cluster", to: 2, adjust2: func(c *transport.Config) { c.ClusterID = "another" }},
		{name: "another formation", to: 2,
			adjust1: func(c *transport.Config) { c.Formation = "F" },
			adjust2: func(c *transport.Config) { c.Formation, c.FormationDetail = "G", "members 2" }},
		{name: "caller without a formation", to: 2, adjust2: func(c *transport.Config) { c.Formation = "G" }},
		{name: "deadline", to: 2, timeout: 100 * time.Millisecond},
	}
	for _, h := range handlerErrors {
		setups = append(setups, setup{name: "handler: " + h.name, to: 2, handlerErr: h.err})
	}
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			var shapes [2]errShape
			for i, mk := range []func(*testing.T, func(*transport.Config), func(*transport.Config)) pair{grpcPair, simPair} {
				p := mk(t, s.adjust1, s.adjust2)
				p.rec2.Call = func(ctx context.Context, _ uint64, _ string, _ proto.Message) (proto.Message, error) {
					if s.timeout > 0 {
						<-ctx.Done()
						return nil, ctx.Err()
					}
					return nil, s.handlerErr
				}
				ctx := context.Background()
				if s.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, s.timeout)
					defer cancel()
				}
				_, err := p.caller.Keepalive(ctx, s.to, &transportpb.KeepaliveRequest{Session: 1})
				shapes[i] = shape(err)
				if s.timeout > 0 {
					// Whether the caller's deadline or the server's answer
					// comes first, and so the text, is a race in both.
					shapes[i].text = ""
				}
			}
			if shapes[0] != shapes[1] {
				t.Fatalf("over gRPC: %+v\nsimulated: %+v", shapes[0], shapes[1])
			}
			t.Logf("both: %+v", shapes[0])
		})
	}
}

func TestCallsToAClosedNodeFailAsOverGRPC(t *testing.T) {
	var codesSeen [2]codes.Code
	for i, mk := range []func(*testing.T, func(*transport.Config), func(*transport.Config)) pair{grpcPair, simPair} {
		p := mk(t, nil, nil)
		_ = p.receiver.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := p.caller.Keepalive(ctx, 2, &transportpb.KeepaliveRequest{})
		codesSeen[i] = status.Code(err)
		if i == 1 {
			_ = p.caller.Close()
			if _, err := p.caller.Keepalive(ctx, 2, &transportpb.KeepaliveRequest{}); !errors.Is(err, transport.ErrClosed) {
				t.Fatalf("a call from a closed endpoint: %v", err)
			}
		}
	}
	if codesSeen[0] != codes.Unavailable || codesSeen[1] != codes.Unavailable {
		t.Fatalf("a call to a closed node: over gRPC %v, simulated %v; want Unavailable", codesSeen[0], codesSeen[1])
	}
}

func TestReceivedMessagesMatchTheGRPCTransport(t *testing.T) {
	msgs := func() []*raftpb.Message {
		withResponses := app(1, 2, 4)
		withResponses.Responses = []*raftpb.Message{msg(raftpb.MessageType_MsgAppResp, 2, 1)}
		return []*raftpb.Message{
			app(1, 2, 1),
			msg(raftpb.MessageType_MsgHup, 1, 2),
			msg(raftpb.MessageType_MsgStorageApplyResp, 1, 2),
			app(3, 2, 2),
			app(raft.LocalAppendThread, 2, 3),
			withResponses,
			app(1, 2, 5),
		}
	}
	var got [2]string
	for i, mk := range []func(*testing.T, func(*transport.Config), func(*transport.Config)) pair{grpcPair, simPair} {
		p := mk(t, nil, nil)
		f, done := counter(2)
		p.rec2.OnReceive = f
		p.caller.Send(msgs())
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the valid messages never arrived")
		}
		var idx []uint64
		for _, m := range p.rec2.Received() {
			idx = append(idx, m.GetIndex())
		}
		got[i] = fmt.Sprintf("received %v, refused %d", idx, p.receiver.Refusals(refusedMessage))
	}
	if got[0] != got[1] {
		t.Fatalf("over gRPC: %s\nsimulated: %s", got[0], got[1])
	}
}

func TestRealTimeDeliveryIsPrompt(t *testing.T) {
	n := New(1)
	defer n.Close()
	if n.settle != 0 {
		t.Fatalf("outside a bubble the network settles for %v", n.settle)
	}
	nodes := cluster(t, n, 3)
	const count = 3000
	f2, done2 := counter(count)
	f3, done3 := counter(count)
	nodes[2].rec.OnReceive, nodes[3].rec.OnReceive = f2, f3
	began := time.Now()
	for i := uint64(1); i <= count; i++ {
		nodes[1].ep.Send([]*raftpb.Message{app(1, 2, i), app(1, 3, i)})
	}
	for _, done := range []<-chan struct{}{done2, done3} {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("not everything arrived")
		}
	}
	t.Logf("%d messages on two links in %v", 2*count, time.Since(began))
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
	if got := nodes[2].rec.ReceivedFrom(1); len(got) != count || got[count-1] != count {
		t.Fatalf("received %d, last %d", len(got), got[len(got)-1])
	}

	// A call and a snapshot, in real time.
	if _, err := nodes[1].ep.Keepalive(context.Background(), 2, &transportpb.KeepaliveRequest{}); err != nil {
		t.Fatal(err)
	}
	f, done := counter(1)
	nodes[3].rec.OnReceive = f
	writeSnapFile(t, nodes[1].dir, 8, "state")
	nodes[1].ep.Send([]*raftpb.Message{snapMsg(1, 3, 8)})
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the snapshot never arrived")
	}
}

func writeSnapFile(t *testing.T, dir string, index uint64, data string) {
	t.Helper()
	writeSnap(t, &node{dir: filepath.Clean(dir)}, index, data)
}
