package simnet

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// foreignLog records OnForeignPeer calls.
type foreignLog struct {
	mu    sync.Mutex
	calls []foreignCall
}

type foreignCall struct {
	id     uint64
	detail string
	dialed bool
}

func (f *foreignLog) record(id uint64, detail string, dialed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, foreignCall{id, detail, dialed})
}

func (f *foreignLog) get() []foreignCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func TestFormationIsAdoptedFromRaftTrafficOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(1)
		defer n.Close()
		var adopted []string
		nodes := map[uint64]*node{
			1: start(t, n, 1, func(c *transport.Config) { c.Formation = "F" }),
			2: start(t, n, 2, func(c *transport.Config) {
				c.AdoptFormation = func(id string) error { adopted = append(adopted, id); return nil }
			}),
		}
		connect(nodes)

		if _, err := nodes[1].ep.Keepalive(t.Context(), 2, &transportpb.KeepaliveRequest{}); err != nil {
			t.Fatalf("a call from a formed node to a fresh one: %v", err)
		}
		if nodes[2].ep.Formation() != "" || len(adopted) != 0 {
			t.Fatalf("a call made the fresh node adopt %q (%v)", nodes[2].ep.Formation(), adopted)
		}
		nodes[1].ep.Send([]*raftpb.Message{app(1, 2, 1)})
		time.Sleep(time.Millisecond)
		if nodes[2].ep.Formation() != "F" || !slices.Equal(adopted, []string{"F"}) {
			t.Fatalf("raft traffic: formation %q, adopted %v; want F once", nodes[2].ep.Formation(), adopted)
		}
		if got := nodes[2].rec.ReceivedFrom(1); !slices.Equal(got, []uint64{1}) {
			t.Fatalf("the adopting message was not delivered: %v", got)
		}
		if err := nodes[2].ep.SetFormation("G"); !errors.Is(err, transport.ErrFormationMismatch) {
			t.Fatalf("SetFormation over an adopted id: %v", err)
		}
	})
}

func TestForeignFormationIsRefusedAndSaidOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(2)
		defer n.Close()
		var foreign1, foreign3 foreignLog
		nodes := map[uint64]*node{
			1: start(t, n, 1, func(c *transport.Config) {
				c.Formation, c.FormationDetail, c.OnForeignPeer = "F", "members 1,2", foreign1.record
			}),
			2: start(t, n, 2, func(c *transport.Config) {
				c.AdoptFormation = func(string) error { return errors.New("disk full") }
			}),
			3: start(t, n, 3, func(c *transport.Config) {
				c.Formation, c.FormationDetail, c.OnForeignPeer = "G", "members 3", foreign3.record
			}),
			4: start(t, n, 4, nil), // fresh, adopts nothing
		}
		connect(nodes)

		for i := uint64(1); i <= 2; i++ {
			nodes[1].ep.Send([]*raftpb.Message{app(1, 3, i)})
			time.Sleep(time.Millisecond)
		}
		if len(nodes[3].rec.Received()) != 0 || nodes[1].rec.UnreachableCount(3) != 2 {
			t.Fatalf("another formation's raft traffic: received %d, reported %d times",
				len(nodes[3].rec.Received()), nodes[1].rec.UnreachableCount(3))
		}
		if got := foreign1.get(); !slices.Equal(got, []foreignCall{{3, "members 3", true}}) {
			t.Fatalf("the sender's OnForeignPeer: %+v", got)
		}
		if got := foreign3.get(); !slices.Equal(got, []foreignCall{{1, "members 1,2", false}}) {
			t.Fatalf("the receiver's OnForeignPeer: %+v", got)
		}
		_, err := nodes[1].ep.Keepalive(t.Context(), 3, &transportpb.KeepaliveRequest{})
		if !errors.Is(err, transport.ErrFormationMismatch) || !strings.Contains(err.Error(), "members 3") {
			t.Fatalf("a call to another formation: %v", err)
		}

		// A fresh node that cannot adopt refuses the formed node's traffic.
		nodes[1].ep.Send([]*raftpb.Message{app(1, 2, 1)})
		time.Sleep(time.Millisecond)
		if len(nodes[2].rec.Received()) != 0 || nodes[2].ep.Formation() != "" || nodes[1].rec.UnreachableCount(2) != 1 {
			t.Fatalf("failed adoption: received %d, formation %q", len(nodes[2].rec.Received()), nodes[2].ep.Formation())
		}

		// A node without a formation may call a formed one, not send it raft
		// traffic.
		if _, err := nodes[4].ep.Keepalive(t.Context(), 1, &transportpb.KeepaliveRequest{}); err != nil {
			t.Fatalf("a fresh node's call: %v", err)
		}
		nodes[4].ep.Send([]*raftpb.Message{app(4, 1, 1)})
		time.Sleep(time.Millisecond)
		if len(nodes[1].rec.Received()) != 0 || nodes[4].rec.UnreachableCount(1) != 1 {
			t.Fatal("a formed node took raft traffic without a formation id")
		}
	})
}
