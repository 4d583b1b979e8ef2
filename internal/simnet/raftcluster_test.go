package simnet

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/transport"
)

// raftNode is a minimal node around etcd raft's RawNode: one loop goroutine
// owns the RawNode; the Handler only queues for it. Its state machine is the
// list of entries applied; a snapshot's file holds that list.
type raftNode struct {
	*recorder // the calls, unused
	id        uint64
	ep        *Endpoint
	dir       string
	st        *raft.MemoryStorage
	rn        *raft.RawNode

	inbox chan func()
	stop  chan struct{}
	done  chan struct{}

	mu      sync.Mutex
	state   []string // applied entries
	lead    uint64
	fromSnp int // snapshots restored
}

var voters = &raftpb.ConfState{Voters: []uint64{1, 2, 3}}

func newRaftNode(t *testing.T, n *Network, id uint64) *raftNode {
	t.Helper()
	st := raft.NewMemoryStorage()
	if err := st.ApplySnapshot(&raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{
		Index: proto.Uint64(1), Term: proto.Uint64(1), ConfState: voters}}); err != nil {
		t.Fatal(err)
	}
	rn, err := raft.NewRawNode(&raft.Config{ID: id, ElectionTick: 10, HeartbeatTick: 1, Storage: st,
		MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 64, CheckQuorum: true, PreVote: true,
		Logger: &raft.DefaultLogger{Logger: log.New(io.Discard, "", 0)}})
	if err != nil {
		t.Fatal(err)
	}
	r := &raftNode{recorder: &recorder{ID: id}, id: id, st: st, rn: rn,
		inbox: make(chan func(), 4096), stop: make(chan struct{}), done: make(chan struct{})}
	cfg := config(t, id, r.recorder)
	cfg.Handler = r
	tn, err := n.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.ep, r.dir = tn.(*Endpoint), cfg.SnapshotDir
	go r.loop()
	return r
}

func (r *raftNode) do(f func()) {
	select {
	case r.inbox <- f:
	default: // the loop is far behind: drop, raft retries
	}
}

func (r *raftNode) Receive(msgs []*raftpb.Message) {
	r.do(func() {
		for _, m := range msgs {
			_ = r.rn.Step(m)
		}
	})
}

func (r *raftNode) ReportUnreachable(id uint64) { r.do(func() { r.rn.ReportUnreachable(id) }) }

func (r *raftNode) ReportSnapshot(id uint64, failed bool) {
	st := raft.SnapshotFinish
	if failed {
		st = raft.SnapshotFailure
	}
	select {
	case r.inbox <- func() { r.rn.ReportSnapshot(id, st) }:
	case <-r.stop:
	}
}

// ReceiveSnapshot checks that the file holds what the snapshot says, and
// steps the MsgSnap.
func (r *raftNode) ReceiveSnapshot(ctx context.Context, m *raftpb.Message, file string) error {
	data, err := os.ReadFile(file)
	_ = os.Remove(file)
	if err != nil {
		return err
	}
	if !slices.Equal(data, m.GetSnapshot().GetData()) {
		return fmt.Errorf("the file holds %q, the snapshot %q", data, m.GetSnapshot().GetData())
	}
	select {
	case r.inbox <- func() { _ = r.rn.Step(m) }:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *raftNode) loop() {
	defer close(r.done)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-tick.C:
			r.rn.Tick()
		case f := <-r.inbox:
			f()
		}
		for r.rn.HasReady() {
			rd := r.rn.Ready()
			if !raft.IsEmptySnap(rd.Snapshot) {
				_ = r.st.ApplySnapshot(rd.Snapshot)
				r.mu.Lock()
				r.state = strings.Fields(string(rd.Snapshot.GetData()))
				r.fromSnp++
				r.mu.Unlock()
			}
			if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
				_ = r.st.SetHardState(rd.HardState)
			}
			_ = r.st.Append(rd.Entries)
			r.ep.Send(rd.Messages)
			r.mu.Lock()
			for _, e := range rd.CommittedEntries {
				if e.GetType() == raftpb.EntryType_EntryNormal && len(e.GetData()) > 0 {
					r.state = append(r.state, string(e.GetData()))
				}
			}
			if rd.SoftState != nil {
				r.lead = rd.SoftState.Lead
			}
			r.mu.Unlock()
			r.rn.Advance(rd)
		}
	}
}

// snapshot compacts the log into a snapshot at the applied state and
// writes its file, as a node does before raft may send it.
func (r *raftNode) snapshot(t *testing.T) {
	done := make(chan error, 1)
	r.inbox <- func() {
		r.mu.Lock()
		data := []byte(strings.Join(r.state, " "))
		r.mu.Unlock()
		applied := r.rn.Status().Applied
		snap, err := r.st.CreateSnapshot(applied, voters, data)
		if err == nil {
			err = os.WriteFile(transport.SnapshotPath(r.dir, applied), data, 0o600)
		}
		if err == nil {
			err = r.st.Compact(snap.GetMetadata().GetIndex())
		}
		done <- err
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func (r *raftNode) propose(data string) { r.do(func() { _ = r.rn.Propose([]byte(data)) }) }

func (r *raftNode) view() (lead uint64, state []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lead, slices.Clone(r.state)
}

// waitFor sleeps in fake time until cond holds, or fails after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
	}
}

// TestRaftClusterOverALossyNetwork runs three real raft nodes over a lossy,
// reordering network: they elect a leader, replicate, survive the leader's
// isolation, and bring it back with a snapshot sent as a file. Nothing raft
// sends may be refused as a message a remote peer may never send. (It is
// not a replay of its seed: raft draws its election jitter from
// crypto/rand, beyond the network's reach.)
func TestRaftClusterOverALossyNetwork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const seed = 99
		t.Logf("seed %d", seed)
		n := New(seed, WithPolicy(Policy{Drop: 0.05, Duplicate: 0.02, Reorder: 0.1,
			MinDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}))
		defer n.Close()
		nodes := make(map[uint64]*raftNode)
		for id := uint64(1); id <= 3; id++ {
			nodes[id] = newRaftNode(t, n, id)
		}
		for _, a := range nodes {
			for id := range nodes {
				a.ep.AddPeer(id, Addr(id))
			}
		}
		defer func() {
			for _, r := range nodes {
				close(r.stop)
				<-r.done
			}
		}()
		leader := func(among ...uint64) uint64 {
			var l uint64
			for _, id := range among {
				lead, _ := nodes[id].view()
				if lead == 0 || (l != 0 && lead != l) {
					return 0
				}
				l = lead
			}
			return l
		}
		agreed := func(want int, among ...uint64) func() bool {
			return func() bool {
				_, s0 := nodes[among[0]].view()
				for _, id := range among {
					if _, s := nodes[id].view(); len(s) != want || !slices.Equal(s, s0) {
						return false
					}
				}
				return true
			}
		}
		all := []uint64{1, 2, 3}
		waitFor(t, 10*time.Second, "a leader", func() bool { return leader(all...) != 0 })
		first := leader(all...)
		for i := range 30 {
			nodes[first].propose(fmt.Sprintf("a%d", i))
		}
		waitFor(t, 10*time.Second, "30 entries everywhere", agreed(30, all...))

		n.Isolate(first)
		var rest []uint64
		for _, id := range all {
			if id != first {
				rest = append(rest, id)
			}
		}
		waitFor(t, 10*time.Second, "a new leader", func() bool { l := leader(rest...); return l != 0 && l != first })
		second := leader(rest...)
		for i := range 20 {
			nodes[second].propose(fmt.Sprintf("b%d", i))
		}
		waitFor(t, 10*time.Second, "50 entries on the majority", agreed(50, rest...))
		nodes[second].snapshot(t)
		n.Heal()
		waitFor(t, 20*time.Second, "the old leader caught up", agreed(50, all...))

		nodes[first].mu.Lock()
		restored := nodes[first].fromSnp
		nodes[first].mu.Unlock()
		if restored == 0 {
			t.Fatal("the old leader caught up without a snapshot")
		}
		for id, r := range nodes {
			if c := r.ep.Refusals(refusedMessage); c != 0 {
				t.Fatalf("node %d refused %d raft messages", id, c)
			}
		}
		t.Logf("leaders %d then %d; caught up at %v", first, second, time.Since(n.start))
	})
}
