package forward

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/transport/transportpb"
)

func change(name string, index, token uint64) Change {
	return Change{Name: name, Index: index, Session: 5, Owner: "o", Token: token, Value: fmt.Sprint("v", index)}
}

// The records: the last HistoryLen changes of each election, at most
// MaxHistories elections (the oldest evicted), and what they cover.
func TestHistoryCovers(t *testing.T) {
	f := newFixture(t)
	f.table.applied = 10
	f.s.Restored(10) // records cover the changes after 10
	for i := uint64(1); i <= HistoryLen+2; i++ {
		f.s.OnLeaderChange(change("e", 10+i, i))
	}
	h := f.s.elections["e"]
	require.Len(t, h.changes, HistoryLen)
	require.Equal(t, uint64(13), h.changes[0].Index)
	require.Equal(t, uint64(12), h.trimmed)
	for _, tc := range []struct {
		name  string
		elect string
		after uint64
		want  bool
	}{
		{"before the start", "e", 9, false},
		{"trimmed", "e", 11, false},
		{"last trimmed", "e", 12, true},
		{"recorded", "e", 50, true},
		{"no changes since the start", "other", 10, true},
		{"before the start, no changes", "other", 9, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, f.s.covers(f.s.elections[tc.elect], tc.after))
		})
	}
	require.Equal(t, uint64(10+HistoryLen+2), f.s.lastChangeBefore(h))
	require.Equal(t, uint64(10), f.s.lastChangeBefore(nil))

	// Evicting the election changed longest ago: what it covered is lost
	// for every election.
	f.s.OnLeaderChange(change("old", 5000, 1))
	for i := range MaxHistories - 2 {
		f.s.OnLeaderChange(change(fmt.Sprint("n", i), uint64(6000+i), 1))
	}
	require.Len(t, f.s.elections, MaxHistories)
	f.s.OnLeaderChange(change("new", 20000, 1))
	require.Len(t, f.s.elections, MaxHistories)
	require.NotContains(t, f.s.elections, "e", "e changed longest ago")
	require.Equal(t, uint64(10+HistoryLen+2), f.s.cover.evicted)
	require.False(t, f.s.covers(nil, 50))
	require.True(t, f.s.covers(nil, 10+HistoryLen+2))

	f.s.Restored(30000)
	require.Empty(t, f.s.elections)
	require.False(t, f.s.covers(nil, 20000))
}

// ServeObserve: the changes after the member's mark if the records cover
// them, else the current state, which tells a member that asked for changes
// that it lagged.
func TestServeObserve(t *testing.T) {
	f := newFixture(t)
	f.table.applied = 100
	f.s.Restored(100)
	f.h.ready = true
	f.s.leading = true
	for i := uint64(101); i <= 104; i++ {
		f.s.OnLeaderChange(change("e", i, i))
	}
	f.table.applied = 110
	f.table.leaders["e"] = lockfsm.LeaderInfo{Holder: lockfsm.Holder{Session: 5, Owner: "o"}, Token: 104, Value: "v104"}
	cur := &transportpb.ElectionState{Index: 110, Session: 5, Owner: []byte("o"), Token: 104, Value: []byte("v104")}
	st := func(i uint64) *transportpb.ElectionState { return electionState(change("e", i, i)) }
	for _, tc := range []struct {
		name  string
		after uint64
		want  *transportpb.ObservedElection
	}{
		{"a new observer", 0, &transportpb.ObservedElection{Current: true, Chain: 110, Changes: []*transportpb.ElectionState{cur}}},
		{"changes since", 102, &transportpb.ObservedElection{Chain: 110, Changes: []*transportpb.ElectionState{st(103), st(104)}}},
		{"nothing since", 104, &transportpb.ObservedElection{Chain: 110}},
		{"a mark ahead", 120, &transportpb.ObservedElection{Chain: 120}},
		{"not covered", 99, &transportpb.ObservedElection{Current: true, Chain: 110, Changes: []*transportpb.ElectionState{cur}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := f.s.ServeObserve(lightID, &transportpb.ObserveRequest{Names: []*transportpb.ObserveName{{Name: "e",
				After: tc.after}}}, t0)
			require.Nil(t, resp.GetNotLeader())
			require.Len(t, resp.GetElections(), 1)
			got := resp.GetElections()[0]
			require.Equal(t, tc.want.GetCurrent(), got.GetCurrent())
			require.Equal(t, tc.want.GetChain(), got.GetChain())
			require.Len(t, got.GetChanges(), len(tc.want.GetChanges()))
			for i, c := range tc.want.GetChanges() {
				require.Equal(t, ChangeOf("e", c), ChangeOf("e", got.GetChanges()[i]))
			}
		})
	}
	f.h.ready = false
	require.NotNil(t, f.s.ServeObserve(lightID, &transportpb.ObserveRequest{}, t0).GetNotLeader(), "not ready")
}

// A subscribed light member is pushed each later change with the index
// after which nothing changed before it; a subscription not refreshed for
// 4 WaitChecks ends.
func TestPushLeaderChange(t *testing.T) {
	f := newFixture(t)
	f.table.applied = 100
	f.s.Restored(100)
	f.leading()
	sub := func(node uint64, now time.Time) {
		f.s.ServeObserve(node, &transportpb.ObserveRequest{Names: []*transportpb.ObserveName{{Name: "e"}}}, now)
	}
	sub(lightID, t0)
	sub(3, t0) // a raft member (in the configuration): applies changes itself
	c1, c2 := change("e", 105, 1), change("e", 107, 2)
	f.s.OnLeaderChange(c1)
	f.s.OnLeaderChange(c2)
	f.s.OnLeaderChange(change("other", 108, 1))
	item := func(c Change, prev uint64) *transportpb.PushItem {
		return &transportpb.PushItem{Item: &transportpb.PushItem_LeaderChange{LeaderChange: &transportpb.LeaderChangePush{
			Name: c.Name, Prev: prev, Change: electionState(c)}}}
	}
	got := f.pushes()
	require.Len(t, got, 1)
	requireItems(t, []*transportpb.PushItem{item(c1, 100), item(c2, 105)}, got[lightID])

	// Another member's Observe, long after: the stale subscription ends.
	sub(lightID+1, t0.Add(4*f.s.WaitCheck()+1))
	f.s.OnLeaderChange(change("e", 110, 3))
	got = f.pushes()
	require.NotContains(t, got, uint64(lightID))
	require.Contains(t, got, uint64(lightID+1))
}

// ObserveReply: what a light member does with the leader's answer for
// each name.
func TestObserveReply(t *testing.T) {
	cur := &transportpb.ElectionState{Index: 50, Token: 4}
	later := []*transportpb.ElectionState{{Index: 30, Token: 2}, {Index: 40, Token: 3}}
	for _, tc := range []struct {
		name        string
		watched     *watchState // nil: nobody watches it any more
		after       uint64
		el          *transportpb.ObservedElection
		wantDeliver []uint64 // indexes
		wantLagged  bool
		wantDue     bool
		wantChain   uint64
	}{
		{name: "first state", watched: &watchState{}, el: &transportpb.ObservedElection{Current: true, Chain: 50,
			Changes: []*transportpb.ElectionState{cur}}, wantDeliver: []uint64{50}, wantChain: 50},
		{name: "changes since the mark", watched: &watchState{known: true, chain: 20}, after: 20,
			el:          &transportpb.ObservedElection{Chain: 60, Changes: later},
			wantDeliver: []uint64{30, 40}, wantChain: 60},
		{name: "only the changes after the mark", watched: &watchState{known: true, chain: 35}, after: 30,
			el:          &transportpb.ObservedElection{Chain: 60, Changes: later},
			wantDeliver: []uint64{40}, wantChain: 60},
		{name: "records do not reach back: lagged", watched: &watchState{known: true, chain: 20}, after: 20,
			el: &transportpb.ObservedElection{Current: true, Chain: 50, Changes: []*transportpb.ElectionState{cur}}, wantLagged: true},
		{name: "observers ended meanwhile: ask afresh", watched: &watchState{}, after: 20,
			el: &transportpb.ObservedElection{Chain: 60, Changes: later}, wantDue: true},
		{name: "answered meanwhile", watched: &watchState{known: true, chain: 50},
			el: &transportpb.ObservedElection{Current: true, Chain: 50, Changes: []*transportpb.ElectionState{cur}}, wantChain: 50},
		{name: "not an answer to the question", watched: &watchState{},
			el: &transportpb.ObservedElection{Chain: 60, Changes: later}},
		{name: "nobody watches", el: &transportpb.ObservedElection{Chain: 60, Changes: later}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t).lightMember()
			if tc.watched != nil {
				f.h.watched["e"] = tc.watched
			}
			f.s.ObserveReply([]string{"e"}, []uint64{tc.after}, []*transportpb.ObservedElection{tc.el})
			var got []uint64
			for _, c := range f.h.delivered {
				require.Equal(t, "e", c.Name)
				got = append(got, c.Index)
			}
			require.Equal(t, tc.wantDeliver, got)
			require.Equal(t, tc.wantLagged, len(f.h.lagged) > 0)
			require.Equal(t, tc.wantDue, f.s.observeDue)
			if w := f.h.watched["e"]; w != nil && !tc.wantDue && tc.wantChain != 0 {
				require.True(t, w.known)
				require.Equal(t, tc.wantChain, w.chain)
			}
		})
	}
	t.Run("promoted meanwhile", func(t *testing.T) {
		f := newFixture(t)
		f.h.watched["e"] = &watchState{}
		f.s.ObserveReply([]string{"e"}, []uint64{0}, []*transportpb.ObservedElection{{Current: true,
			Changes: []*transportpb.ElectionState{cur}}})
		require.Empty(t, f.h.delivered, "a raft member applies its changes itself")
	})
}

// ObservePush: a pushed change is delivered if it follows the member's
// chain, dropped if it is a duplicate, and a gap makes the member ask.
func TestObservePush(t *testing.T) {
	for _, tc := range []struct {
		name        string
		known       bool
		index, prev uint64
		wantDeliver bool
		wantGap     bool
	}{
		{name: "follows", known: true, index: 30, prev: 20, wantDeliver: true},
		{name: "follows from before the chain", known: true, index: 30, prev: 15, wantDeliver: true},
		{name: "duplicate", known: true, index: 20, prev: 10},
		{name: "gap", known: true, index: 30, prev: 25, wantGap: true},
		{name: "prev unknown", known: true, index: 30, wantGap: true},
		{name: "state not known yet", index: 30, prev: 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t).lightMember()
			f.h.watched["e"] = &watchState{known: tc.known, chain: 20}
			gap := f.s.ObservePush(&transportpb.LeaderChangePush{Name: "e", Prev: tc.prev,
				Change: &transportpb.ElectionState{Index: tc.index}}, t0)
			require.Equal(t, tc.wantGap, gap)
			require.Equal(t, tc.wantDeliver, len(f.h.delivered) == 1)
			f.h.settle()
			calls := f.net.take()
			if tc.wantGap {
				require.Len(t, calls, 1, "asks the leader")
				require.Equal(t, "Observe", calls[0].method)
				require.Equal(t, uint64(20), calls[0].req.(*transportpb.ObserveRequest).GetNames()[0].GetAfter())
			} else {
				require.Empty(t, calls)
			}
		})
	}
}

// The member subscribes when asked to (a new name, a new leader, a gap),
// else every WaitCheck, one call at a time (one asked for meanwhile is made
// on the next tick), with its names in order and each one's mark; a failed
// call is made again on the next tick.
func TestObserveTick(t *testing.T) {
	f := newFixture(t).lightMember()
	f.h.watched["b"] = &watchState{known: true, chain: 7}
	f.h.watched["a"] = &watchState{}
	var fail error
	f.net.observe = func(uint64, *transportpb.ObserveRequest) (*transportpb.ObserveResponse, error) {
		return &transportpb.ObserveResponse{}, fail
	}
	f.s.ObserveNow(t0)
	f.s.ObserveNow(t0) // one in flight: this one waits for the next tick
	f.h.settle()
	calls := f.net.take()
	require.Len(t, calls, 1)
	f.s.Tick(t0)
	f.h.settle()
	require.Len(t, f.net.take(), 1, "the call asked for while one was in flight")
	require.Equal(t, uint64(leaderID), calls[0].to)
	names := calls[0].req.(*transportpb.ObserveRequest).GetNames()
	require.Len(t, names, 2)
	require.Equal(t, "a", names[0].GetName())
	require.Zero(t, names[0].GetAfter())
	require.Equal(t, "b", names[1].GetName())
	require.Equal(t, uint64(7), names[1].GetAfter())

	f.s.Tick(t0.Add(f.s.WaitCheck() - 1))
	f.h.settle()
	require.Empty(t, f.net.take(), "not due")
	fail = errors.New("down")
	f.s.Tick(t0.Add(f.s.WaitCheck()))
	f.h.settle()
	require.Len(t, f.net.take(), 1, "every WaitCheck")
	require.True(t, f.s.observeDue, "failed: again")

	f.h.leader = leaderID // (the failure made it forget the leader)
	fail = nil
	f.s.Tick(t0.Add(f.s.WaitCheck() + 1))
	f.h.settle()
	require.Len(t, f.net.take(), 1)

	clear(f.h.watched)
	f.s.ObserveNow(t0.Add(time.Hour))
	f.h.settle()
	require.Empty(t, f.net.take(), "nothing watched")
}
