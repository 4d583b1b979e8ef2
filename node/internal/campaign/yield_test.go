package campaign

import (
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

func preVoteResp(from uint64, reject bool) *raftpb.Message {
	t := raftpb.MessageType_MsgPreVoteResp
	return &raftpb.Message{Type: &t, From: &from, Reject: &reject}
}

// A member that grants a pre-vote stands aside if it was not campaigning,
// or if the peer's id is lower; it never does for a higher id while it
// campaigns itself.
func TestGrantedStandsAside(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		self, to    uint64
		campaigning bool
		want        bool
	}{
		{self: 2, to: 3, campaigning: false, want: true}, // the peer was first
		{self: 2, to: 1, campaigning: true, want: true},  // a tie: the lower id goes ahead
		{self: 2, to: 3, campaigning: true, want: false}, // a tie: this member goes ahead
		{self: 2, to: 2, campaigning: false, want: false},
		{self: 2, to: 0, campaigning: false, want: false},
	} {
		y := Yield{For: 20 * time.Millisecond}
		if got := y.Granted(t0, c.self, c.to, 5, c.campaigning); got != c.want {
			t.Errorf("%+v: stands aside %v", c, got)
		}
		if _, standing := y.Standing(t0); standing != c.want {
			t.Errorf("%+v: standing %v", c, standing)
		}
	}
	var off Yield
	if off.Granted(t0, 2, 3, 5, false) {
		t.Error("For 0: never stands aside")
	}
}

// While standing aside, pre-vote grants are dropped (nothing else), and
// not after.
func TestDropsPreVoteGrantsWhileStanding(t *testing.T) {
	t0 := time.Unix(1000, 0)
	y := Yield{For: 20 * time.Millisecond}
	y.Granted(t0, 2, 1, 5, true)
	if !y.Drop(t0.Add(19*time.Millisecond), preVoteResp(3, false)) {
		t.Fatal("a pre-vote grant while standing aside is dropped")
	}
	if y.Drop(t0.Add(19*time.Millisecond), preVoteResp(3, true)) {
		t.Fatal("a refusal is stepped")
	}
	vt := raftpb.MessageType_MsgVote
	if y.Drop(t0.Add(time.Millisecond), &raftpb.Message{Type: &vt}) {
		t.Fatal("the peer's vote request is stepped")
	}
	if y.Drop(t0.Add(20*time.Millisecond), preVoteResp(3, false)) {
		t.Fatal("not after For")
	}
}

// A member stands aside for the lowest id it granted.
func TestStandsAsideForTheLowestID(t *testing.T) {
	t0 := time.Unix(1000, 0)
	y := Yield{For: 20 * time.Millisecond}
	y.Granted(t0, 5, 3, 7, false)
	y.Granted(t0.Add(time.Millisecond), 5, 4, 7, false)
	if to, _ := y.Standing(t0.Add(time.Millisecond)); to != 3 {
		t.Fatalf("stands aside for %d, want 3", to)
	}
	y.Granted(t0.Add(2*time.Millisecond), 5, 1, 7, false)
	if to, _ := y.Standing(t0.Add(2 * time.Millisecond)); to != 1 {
		t.Fatalf("stands aside for %d, want 1", to)
	}
}

// When standing aside runs out with raft still at its term and no leader,
// the member campaigns (once); not if the peer's vote request moved it to
// the next term, nor with a leader.
func TestEndedCampaignsOnlyIfThePeerDidNot(t *testing.T) {
	t0 := time.Unix(1000, 0)
	end := t0.Add(20 * time.Millisecond)
	y := Yield{For: 20 * time.Millisecond}
	y.Granted(t0, 2, 1, 5, true)
	if y.Ended(t0.Add(10*time.Millisecond), 5, 0) {
		t.Fatal("not before it ran out")
	}
	if !y.Ended(end, 5, 0) {
		t.Fatal("the peer never campaigned: campaign now")
	}
	if y.Ended(end, 5, 0) {
		t.Fatal("once")
	}
	y.Granted(t0, 2, 1, 5, true)
	if y.Ended(end, 6, 0) {
		t.Fatal("the peer's vote request moved raft to the next term: no campaign")
	}
	y.Granted(t0, 2, 1, 5, true)
	if y.Ended(end, 5, 1) {
		t.Fatal("a leader is known: no campaign")
	}
}
