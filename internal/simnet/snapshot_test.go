package simnet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/transport"
)

func snapMsg(from, to, index uint64) *raftpb.Message {
	m := msg(raftpb.MessageType_MsgSnap, from, to)
	m.Snapshot = &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(index), Term: proto.Uint64(1)}}
	return m
}

// writeSnap writes the snapshot file of index in nd's SnapshotDir.
func writeSnap(t *testing.T, nd *node, index uint64, data string) {
	t.Helper()
	if err := os.WriteFile(transport.SnapshotPath(nd.dir, index), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// temps lists the transfer files left in dir.
func temps(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.snap.tmp-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSnapshotTransferCopiesTheFile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := newCluster(t, 1, 2, WithPolicy(Policy{MinDelay: 2 * time.Millisecond, MaxDelay: 2 * time.Millisecond}))
		writeSnap(t, nodes[1], 42, "the state at 42")
		var handed string
		nodes[2].rec.ReceiveSnap = func(ctx context.Context, m *raftpb.Message, file string) error {
			handed = file
			return nodes[2].rec.TakeSnapshot(m, file)
		}
		sent := time.Now()
		nodes[1].ep.Send([]*raftpb.Message{snapMsg(1, 2, 42)})
		time.Sleep(10 * time.Millisecond)

		// (The report comes after ReceiveSnapshot returned: read it first.)
		reps := nodes[1].rec.SnapReports()
		if len(reps) != 1 || reps[0].ID != 2 || reps[0].Failed {
			t.Fatalf("the sender was told %+v, want one success for 2", reps)
		}
		if dir, base := filepath.Split(handed); filepath.Clean(dir) != nodes[2].dir || !strings.HasPrefix(base, fmt.Sprintf("%016x.snap.tmp-", 42)) {
			t.Fatalf("ReceiveSnapshot was handed %q, want a transfer file in %s", handed, nodes[2].dir)
		}
		got, err := os.ReadFile(transport.SnapshotPath(nodes[2].dir, 42))
		if err != nil || string(got) != "the state at 42" {
			t.Fatalf("the receiver's file: %q, %v", got, err)
		}
		if ms := nodes[2].rec.Received(); len(ms) != 1 || ms[0].GetSnapshot().GetMetadata().GetIndex() != 42 {
			t.Fatalf("the receiver got %v", ms)
		}
		// There and back, each a delay and a settle.
		if d := reps[0].At.Sub(sent); d != 4*time.Millisecond+2*Settle {
			t.Fatalf("reported after %v, want 4ms and two settles", d)
		}
	})
}

func TestSnapshotFailuresAreReported(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, n *Network, nodes map[uint64]*node)
		// received: whether the receiver took the snapshot anyway.
		received bool
	}{
		{"refused by AcceptSnapshot", func(t *testing.T, n *Network, nodes map[uint64]*node) {
			nodes[2].rec.Accept = func(uint64, *raftpb.Message) error {
				return fmt.Errorf("%w: not the leader", transport.ErrPermissionDenied)
			}
		}, false},
		{"no file at the sender", func(t *testing.T, n *Network, nodes map[uint64]*node) {
			_ = os.Remove(transport.SnapshotPath(nodes[1].dir, 7))
		}, false},
		{"not taken by ReceiveSnapshot", func(t *testing.T, n *Network, nodes map[uint64]*node) {
			nodes[2].rec.ReceiveSnap = func(context.Context, *raftpb.Message, string) error { return errors.New("busy") }
		}, false},
		{"over MaxSnapshotSize", func(t *testing.T, n *Network, nodes map[uint64]*node) {
			writeSnap(t, nodes[1], 7, strings.Repeat("x", 2000))
		}, false},
		{"link cut", func(t *testing.T, n *Network, nodes map[uint64]*node) { n.Block(1, 2) }, false},
		{"acknowledgement lost", func(t *testing.T, n *Network, nodes map[uint64]*node) { n.Block(2, 1) }, true},
		{"lost on the way", func(t *testing.T, n *Network, nodes map[uint64]*node) { n.SetLinkPolicy(1, 2, Policy{Drop: 1}) }, false},
		{"receiver closed", func(t *testing.T, n *Network, nodes map[uint64]*node) { _ = nodes[2].ep.Close() }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := New(2, WithPolicy(Policy{MinDelay: time.Millisecond, MaxDelay: time.Millisecond}))
				defer n.Close()
				nodes := map[uint64]*node{
					1: start(t, n, 1, nil),
					2: start(t, n, 2, func(c *transport.Config) { c.MaxSnapshotSize = 1000 }),
				}
				connect(nodes)
				writeSnap(t, nodes[1], 7, "small")
				c.setup(t, n, nodes)
				nodes[1].ep.Send([]*raftpb.Message{snapMsg(1, 2, 7)})
				time.Sleep(10 * time.Millisecond)
				if reps := nodes[1].rec.SnapReports(); len(reps) != 1 || !reps[0].Failed || reps[0].ID != 2 {
					t.Fatalf("the sender was told %+v, want one failure for 2", reps)
				}
				_, err := os.Stat(transport.SnapshotPath(nodes[2].dir, 7))
				if took := err == nil; took != c.received {
					t.Fatalf("the receiver has the file: %v, want %v", took, c.received)
				}
				if left := temps(t, nodes[2].dir); len(left) != 0 {
					t.Fatalf("transfer files left: %v", left)
				}
			})
		})
	}
}

func TestSnapshotToUnknownPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := newCluster(t, 3, 1)
		writeSnap(t, nodes[1], 5, "x")
		nodes[1].ep.Send([]*raftpb.Message{snapMsg(1, 2, 5)})
		time.Sleep(time.Millisecond)
		if reps := nodes[1].rec.SnapReports(); len(reps) != 1 || !reps[0].Failed || nodes[1].rec.UnreachableCount(2) != 1 {
			t.Fatalf("reports %+v, unreachable %v", reps, nodes[1].rec.Unreachable())
		}
	})
}

func TestOneSnapshotIsReceivedAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := newCluster(t, 4, 3, WithPolicy(Policy{MinDelay: time.Millisecond, MaxDelay: time.Millisecond}))
		writeSnap(t, nodes[1], 9, "from 1")
		writeSnap(t, nodes[3], 9, "from 3")
		release := make(chan struct{})
		var (
			mu   sync.Mutex
			from []uint64
		)
		nodes[2].rec.ReceiveSnap = func(ctx context.Context, m *raftpb.Message, file string) error {
			mu.Lock()
			from = append(from, m.GetFrom())
			mu.Unlock()
			<-release
			return os.Remove(file)
		}
		nodes[1].ep.Send([]*raftpb.Message{snapMsg(1, 2, 9)})
		nodes[3].ep.Send([]*raftpb.Message{snapMsg(3, 2, 9)})
		time.Sleep(10 * time.Millisecond)
		close(release)
		time.Sleep(10 * time.Millisecond)
		// Both arrive at the same instant; 1's is first by the tie-break.
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(from, []uint64{1}) {
			t.Fatalf("ReceiveSnapshot saw transfers from %v, want only 1's", from)
		}
		if r := nodes[1].rec.SnapReports(); len(r) != 1 || r[0].Failed {
			t.Fatalf("1 was told %+v", r)
		}
		if r := nodes[3].rec.SnapReports(); len(r) != 1 || !r[0].Failed {
			t.Fatalf("3 was told %+v", r)
		}
		if got := nodes[2].ep.Refusals(refusedSnapshot); got != 1 {
			t.Fatalf("Refusals(snapshot) = %d, want 1", got)
		}
	})
}
