package simnet

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

func TestFIFOPerLinkAndDeepCopies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const seed = 7
		t.Logf("seed %d", seed)
		_, nodes := newCluster(t, seed, 3, WithPolicy(Policy{MinDelay: time.Millisecond, MaxDelay: 50 * time.Millisecond}))
		var sent []*raftpb.Message
		for i := range 300 {
			m2, m3 := app(1, 2, uint64(i+1)), app(1, 3, uint64(i+1))
			nodes[1].ep.Send([]*raftpb.Message{m2, m3})
			sent = append(sent, m2, m3)
			if i%7 == 0 {
				time.Sleep(3 * time.Millisecond)
			}
		}
		// The sender reuses its messages: no receiver may see it.
		for _, m := range sent {
			m.Entries[0].Data[0] = 'X'
			*m.Index += 1000
		}
		time.Sleep(time.Second)
		for _, id := range []uint64{2, 3} {
			rec := nodes[id].rec
			if got := rec.ReceivedFrom(1); !slices.Equal(got, seq(300)) {
				t.Fatalf("node %d received from 1, in this order: %v", id, got)
			}
			for _, m := range rec.Received() {
				if want := fmt.Sprintf("entry %d", m.GetIndex()); string(m.Entries[0].Data) != want {
					t.Fatalf("node %d: message %d carries %q: it shares memory with the sender's", id, m.GetIndex(), m.Entries[0].Data)
				}
			}
			for _, b := range rec.Batches() {
				for _, m := range b.Msgs {
					if m.GetFrom() != b.Msgs[0].GetFrom() {
						t.Fatalf("node %d: one batch holds messages from %d and %d", id, b.Msgs[0].GetFrom(), m.GetFrom())
					}
				}
			}
		}
	})
}

func TestReorderedLinkDeliversEveryMessageOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const seed = 11
		t.Logf("seed %d", seed)
		_, nodes := newCluster(t, seed, 2, WithPolicy(Policy{Reorder: 1, MinDelay: time.Millisecond, MaxDelay: 50 * time.Millisecond}))
		for i := range 200 {
			nodes[1].ep.Send([]*raftpb.Message{app(1, 2, uint64(i+1))})
		}
		time.Sleep(time.Second)
		got := nodes[2].rec.ReceivedFrom(1)
		if slices.IsSorted(got) {
			t.Fatalf("a reordering link delivered in order: %v", got)
		}
		if slices.Sort(got); !slices.Equal(got, seq(200)) {
			t.Fatalf("received (sorted) %v, want each of 1..200 once", got)
		}
	})
}

func TestPartitionHealAndOneWayBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, nodes := newCluster(t, 1, 3, WithPolicy(Policy{MinDelay: time.Millisecond, MaxDelay: time.Millisecond}))
		index := uint64(0)
		// send sends one message on each given link and returns its index.
		send := func(links ...[2]uint64) uint64 {
			index++
			for _, l := range links {
				nodes[l[0]].ep.Send([]*raftpb.Message{app(l[0], l[1], index)})
			}
			time.Sleep(10 * time.Millisecond)
			return index
		}
		got := func(from, to, i uint64) bool { return slices.Contains(nodes[to].rec.ReceivedFrom(from), i) }
		all := [][2]uint64{{1, 2}, {1, 3}, {2, 1}, {2, 3}, {3, 1}, {3, 2}}
		check := func(what string, i uint64, up map[[2]uint64]bool) {
			t.Helper()
			for _, l := range all {
				if got(l[0], l[1], i) != up[l] {
					t.Fatalf("%s: message %d on %d->%d delivered=%v, want %v", what, i, l[0], l[1], !up[l], up[l])
				}
			}
		}

		n.Partition([]uint64{1}, []uint64{2, 3})
		check("partition {1} {2,3}", send(all...), map[[2]uint64]bool{{2, 3}: true, {3, 2}: true})
		if nodes[1].rec.UnreachableCount(2) != 1 || nodes[2].rec.UnreachableCount(1) != 1 {
			t.Fatalf("cut links not reported: 1 saw %v, 2 saw %v", nodes[1].rec.Unreachable(), nodes[2].rec.Unreachable())
		}
		n.Heal()
		everything := map[[2]uint64]bool{}
		for _, l := range all {
			everything[l] = true
		}
		check("healed", send(all...), everything)

		n.Block(1, 2)
		up := maps(everything)
		up[[2]uint64{1, 2}] = false
		check("block 1->2", send(all...), up)
		n.Heal()

		n.Isolate(3)
		check("isolate 3", send(all...), map[[2]uint64]bool{{1, 2}: true, {2, 1}: true})
		n.Heal()

		n.Partition([]uint64{1}) // 2 and 3, unnamed, stay together
		check("partition {1}", send(all...), map[[2]uint64]bool{{2, 3}: true, {3, 2}: true})
		n.Partition()
		check("partition ended", send(all...), everything)

		// A link cut while a message is on it loses the message.
		n.SetPolicy(Policy{MinDelay: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond})
		index++
		nodes[1].ep.Send([]*raftpb.Message{app(1, 2, index)})
		time.Sleep(5 * time.Millisecond)
		n.Block(1, 2)
		time.Sleep(10 * time.Millisecond)
		n.Heal()
		time.Sleep(10 * time.Millisecond)
		if got(1, 2, index) {
			t.Fatal("a message arrived over a link cut while it was on the way")
		}
	})
}

func maps(m map[[2]uint64]bool) map[[2]uint64]bool {
	out := make(map[[2]uint64]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func TestPolicyRatesAndDelays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const seed, count = 2024, 5000
		t.Logf("seed %d", seed)
		dropped := 0
		n := New(seed, WithTrace(func(ev Event) {
			if ev.Kind == Dropped && ev.Why == lostPolicy {
				dropped++
			}
		}))
		defer n.Close()
		nodes := cluster(t, n, 3)
		n.SetLinkPolicy(1, 2, Policy{Drop: 0.2, Duplicate: 0.1, MinDelay: 10 * time.Millisecond, MaxDelay: 30 * time.Millisecond})
		n.SetLinkPolicy(1, 3, Policy{Reorder: 1, MinDelay: 10 * time.Millisecond, MaxDelay: 30 * time.Millisecond})
		sentAt := make(map[uint64]time.Time)
		for i := uint64(1); i <= count; i++ {
			sentAt[i] = time.Now()
			nodes[1].ep.Send([]*raftpb.Message{app(1, 2, i), app(1, 3, i)})
			time.Sleep(time.Millisecond)
		}
		nodes[2].ep.Send([]*raftpb.Message{app(2, 3, 1)}) // the default policy: at once, no loss
		time.Sleep(time.Second)

		got := nodes[2].rec.ReceivedFrom(1)
		unique := slices.Compact(slices.Clone(got))
		if !slices.IsSorted(got) {
			t.Fatal("a FIFO link with duplicates delivered out of order")
		}
		within := func(what string, v, want, tol float64) {
			t.Helper()
			if math.Abs(v-want) > tol {
				t.Errorf("%s = %.3f, want %.3f ± %.3f", what, v, want, tol)
			}
		}
		within("drop rate", float64(dropped)/count, 0.2, 0.02)
		within("share lost", 1-float64(len(unique))/count, 0.2, 0.02)
		within("duplicate rate", float64(len(got)-len(unique))/float64(len(unique)), 0.1, 0.02)

		// 1->3 reorders, so its messages are not held back: their delays
		// are the policy's, uniform in [10ms, 30ms].
		var sum, lo, hi time.Duration = 0, time.Hour, 0
		seen3 := 0
		for _, b := range nodes[3].rec.Batches() {
			for _, m := range b.Msgs {
				if m.GetFrom() != 1 {
					continue
				}
				seen3++
				d := b.At.Sub(sentAt[m.GetIndex()])
				sum, lo, hi = sum+d, min(lo, d), max(hi, d)
			}
		}
		if seen3 != count {
			t.Fatalf("1->3 delivered %d of %d", seen3, count)
		}
		if lo < 10*time.Millisecond || hi > 30*time.Millisecond+time.Microsecond {
			t.Errorf("delays in [%v, %v], want within [10ms, 30ms] (plus settling)", lo, hi)
		}
		within("mean delay (ms)", float64(sum/count)/float64(time.Millisecond), 20, 0.5)
		if got := nodes[3].rec.ReceivedFrom(2); !slices.Equal(got, []uint64{1}) {
			t.Errorf("2->3 under the default policy delivered %v", got)
		}
	})
}

func TestDuplicatesAreSeparateCopies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := newCluster(t, 3, 2, WithPolicy(Policy{Duplicate: 1}))
		nodes[1].ep.Send([]*raftpb.Message{app(1, 2, 1)})
		time.Sleep(time.Millisecond)
		got := nodes[2].rec.Received()
		if len(got) != 2 || got[0] == got[1] || &got[0].Entries[0].Data[0] == &got[1].Entries[0].Data[0] {
			t.Fatalf("want two separate copies, got %d messages", len(got))
		}
	})
}

func TestOnlyRemoteMessageTypesPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := newCluster(t, 5, 3)
		withResponses := app(1, 2, 4)
		withResponses.Responses = []*raftpb.Message{msg(raftpb.MessageType_MsgAppResp, 2, 1)}
		nodes[1].ep.Send([]*raftpb.Message{
			app(1, 2, 1),
			msg(raftpb.MessageType_MsgHup, 1, 2),               // local
			msg(raftpb.MessageType_MsgStorageAppendResp, 1, 2), // local
			app(3, 2, 2),                                       // claims another sender
			app(raft.LocalApplyThread, 2, 3),                   // names raft's local thread
			withResponses,
			app(1, 2, 5),
		})
		time.Sleep(time.Millisecond)
		got := nodes[2].rec.Received()
		var idx []uint64
		for _, m := range got {
			idx = append(idx, m.GetIndex())
		}
		if !slices.Equal(idx, []uint64{1, 5}) {
			t.Fatalf("received %v, want only the MsgApps 1 and 5", idx)
		}
		if r := nodes[2].ep.Refusals(refusedMessage); r != 5 {
			t.Fatalf("Refusals(%q) = %d, want 5", refusedMessage, r)
		}
	})
}

func TestClosedEndpointLosesMessagesUntilRestarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, nodes := newCluster(t, 9, 3, WithPolicy(Policy{MinDelay: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond}))

		_ = nodes[2].ep.Close()
		nodes[1].ep.Send([]*raftpb.Message{app(1, 2, 1)})
		time.Sleep(20 * time.Millisecond)
		if nodes[1].rec.UnreachableCount(2) != 1 {
			t.Fatalf("a message to a closed endpoint was not reported: %v", nodes[1].rec.Unreachable())
		}

		// What a closing sender has on the way is lost, silently.
		nodes[3].ep.Send([]*raftpb.Message{app(3, 1, 1)})
		time.Sleep(5 * time.Millisecond)
		_ = nodes[3].ep.Close()
		time.Sleep(20 * time.Millisecond)
		if got := nodes[1].rec.ReceivedFrom(3); len(got) != 0 {
			t.Fatalf("a closed sender's message arrived: %v", got)
		}

		if _, err := n.Start(config(t, 1, &recorder{})); err == nil {
			t.Fatal("a second endpoint started under an open id")
		}
		again := start(t, n, 2, nil)
		again.ep.AddPeer(1, Addr(1))
		nodes[1].ep.Send([]*raftpb.Message{app(1, 2, 2)})
		again.ep.Send([]*raftpb.Message{app(2, 1, 7)})
		time.Sleep(20 * time.Millisecond)
		if got := again.rec.ReceivedFrom(1); !slices.Equal(got, []uint64{2}) {
			t.Fatalf("the restarted endpoint received %v, want [2]", got)
		}
		if got := nodes[2].rec.Received(); len(got) != 0 {
			t.Fatalf("the closed endpoint's handler was called: %d messages", len(got))
		}
		if got := nodes[1].rec.ReceivedFrom(2); !slices.Equal(got, []uint64{7}) {
			t.Fatalf("node 1 received %v from the restarted 2", got)
		}
	})
}

func TestUnknownAndMisaddressedPeers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, nodes := newCluster(t, 4, 2)
		nodes[1].ep.Send([]*raftpb.Message{app(1, 9, 1), app(1, 9, 2)})
		nodes[1].ep.AddPeer(2, "10.0.0.2:7000")
		nodes[1].ep.Send([]*raftpb.Message{app(1, 2, 3)})
		time.Sleep(time.Millisecond)
		if c := nodes[1].rec.UnreachableCount(9); c != 1 {
			t.Fatalf("unknown peer reported %d times for one Send, want 1", c)
		}
		if c := nodes[1].rec.UnreachableCount(2); c != 1 || len(nodes[2].rec.Received()) != 0 {
			t.Fatalf("a peer at a wrong address: reported %d times, received %d", c, len(nodes[2].rec.Received()))
		}
	})
}

func TestPausedEndpointGetsEverythingOnResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, nodes := newCluster(t, 6, 3, WithPolicy(Policy{MinDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}))
		n.Pause(2)
		for i := uint64(1); i <= 10; i++ {
			nodes[1].ep.Send([]*raftpb.Message{app(1, 2, i)})
			nodes[3].ep.Send([]*raftpb.Message{app(3, 2, i)})
			time.Sleep(time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		if got := nodes[2].rec.Received(); len(got) != 0 {
			t.Fatalf("a paused endpoint received %d messages", len(got))
		}
		resumed := time.Now()
		n.Resume(2)
		time.Sleep(time.Millisecond)
		for _, from := range []uint64{1, 3} {
			if got := nodes[2].rec.ReceivedFrom(from); !slices.Equal(got, seq(10)) {
				t.Fatalf("after resume, from %d: %v", from, got)
			}
		}
		for _, b := range nodes[2].rec.Batches() {
			if b.At.Before(resumed) {
				t.Fatalf("a batch arrived at %v, before the resume at %v", b.At, resumed)
			}
		}
	})
}
