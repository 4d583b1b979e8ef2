package forward

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// pushes returns the FwdPush calls made so far: to whom, and their items.
func (f *fixture) pushes() map[uint64][]*transportpb.PushItem {
	f.h.settle()
	out := map[uint64][]*transportpb.PushItem{}
	for _, c := range f.net.take() {
		if c.method != "FwdPush" {
			f.h.t.Fatalf("unexpected call %s", c.method)
		}
		out[c.to] = append(out[c.to], c.req.(*transportpb.FwdPushRequest).GetItems()...)
	}
	return out
}

func requireItems(t *testing.T, want, got []*transportpb.PushItem) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.True(t, proto.Equal(want[i], got[i]), "item %d: want %v, got %v", i, want[i], got[i])
	}
}

// What the leader pushes to light members: results of their commands and
// events of their sessions, and nothing of raft members' or while it does
// not lead.
func TestPushes(t *testing.T) {
	const (
		lightSess = 100 // a light member's session, open when it became leader
		raftSess  = 101 // a raft member's
	)
	acquire := func(sess uint64) *lockfsm.Command {
		return &lockfsm.Command{Kind: lockfsm.KindAcquire, Session: sess, Seq: 1, Name: "n", Owner: "o"}
	}
	granted := lockfsm.Result{Status: lockfsm.Granted, Token: 5}
	ev := func(k lockfsm.EventKind, sess uint64, fromQueue bool) *lockfsm.Event {
		return &lockfsm.Event{Kind: k, Session: sess, Seq: 1, Name: "n", FromQueue: fromQueue, Token: 6}
	}
	for _, tc := range []struct {
		name   string
		lead   bool
		result *lockfsm.Command
		event  *lockfsm.Event
		want   *transportpb.PushItem // to the light member
	}{
		{name: "result", lead: true, result: acquire(lightSess), want: ResultItem(acquire(lightSess), granted, 0)},
		{name: "raft member's result", lead: true, result: acquire(raftSess)},
		{name: "sessionless", lead: true, result: &lockfsm.Command{Kind: lockfsm.KindExpireLease, Name: "n"}},
		{name: "not leading", result: acquire(lightSess)},
		{name: "grant from the queue", lead: true, event: ev(lockfsm.EventGranted, lightSess, true),
			want: EventItem(ev(lockfsm.EventGranted, lightSess, true))},
		{name: "immediate grant: in the result", lead: true, event: ev(lockfsm.EventGranted, lightSess, false)},
		{name: "released", lead: true, event: ev(lockfsm.EventReleased, lightSess, false),
			want: EventItem(ev(lockfsm.EventReleased, lightSess, false))},
		{name: "raft member's event", lead: true, event: ev(lockfsm.EventReleased, raftSess, false)},
		{name: "election change: its own way", lead: true, event: ev(lockfsm.EventLeader, lightSess, false)},
		{name: "event, not leading", event: ev(lockfsm.EventReleased, lightSess, false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.table.sessions = []lockfsm.SessionInfo{{Session: lightSess, Node: lightID}, {Session: raftSess, Node: 3},
				{Session: 102, Node: self}}
			f.leading()
			if !tc.lead {
				f.s.StepDown()
			}
			if tc.result != nil {
				f.s.OnResult(tc.result, granted)
			} else {
				f.s.OnEvent(tc.event)
			}
			got := f.pushes()
			if tc.want == nil {
				require.Empty(t, got)
				return
			}
			require.Len(t, got, 1)
			requireItems(t, []*transportpb.PushItem{tc.want}, got[lightID])
			require.Equal(t, uint64(1), f.s.PushesSent())
		})
	}
}

// The leader learns light members' sessions as they open, forgets them as
// they end, and pushes what it queued meanwhile in one call, in order.
func TestPushSessionsAndBatches(t *testing.T) {
	f := newFixture(t).leading()
	f.s.OnEvent(&lockfsm.Event{Kind: lockfsm.EventSessionOpened, Node: lightID, Session: 50, Seq: 7})
	f.s.OnEvent(&lockfsm.Event{Kind: lockfsm.EventSessionOpened, Node: 3, Session: 51, Seq: 8})
	require.Empty(t, f.pushes(), "an opened session is no push")
	cmd := &lockfsm.Command{Kind: lockfsm.KindAcquire, Session: 50, Seq: 1}
	f.s.OnResult(cmd, lockfsm.Result{Status: lockfsm.Queued})
	end := &lockfsm.Event{Kind: lockfsm.EventSessionEnded, Session: 50, Reason: lockfsm.ReasonSessionExpired}
	f.s.OnEvent(end)
	f.s.OnResult(&lockfsm.Command{Kind: lockfsm.KindAcquire, Session: 51, Seq: 1}, lockfsm.Result{})
	got := f.pushes()
	require.Len(t, got, 1)
	requireItems(t, []*transportpb.PushItem{ResultItem(cmd, lockfsm.Result{Status: lockfsm.Queued}, 0), EventItem(end)},
		got[lightID])
	f.s.OnResult(cmd, lockfsm.Result{})
	require.Empty(t, f.pushes(), "the session ended")
	require.Equal(t, uint64(2), f.s.PushesSent())
}

// OpenOnLeader proposes a light member's OpenSession (again after
// RetryInterval) and answers every call for it once it is applied.
func TestOpenOnLeader(t *testing.T) {
	f := newFixture(t)
	f.h.leader = 3
	r0 := make(chan *transportpb.FwdOpenResponse, 1)
	f.s.OpenOnLeader(lightID, 11, 2000, t0, r0)
	require.Equal(t, uint64(3), (<-r0).GetNotLeader().GetLeader(), "not leading: the hint")
	f.leading()
	r1, r2, r3 := make(chan *transportpb.FwdOpenResponse, 1), make(chan *transportpb.FwdOpenResponse, 1),
		make(chan *transportpb.FwdOpenResponse, 1)
	f.s.OpenOnLeader(lightID, 11, 2000, t0, r1)
	f.s.OpenOnLeader(lightID, 11, 2000, t0.Add(retry-1), r2)
	f.s.OpenOnLeader(lightID, 11, 2000, t0.Add(retry), r3)
	open := lockfsm.Command{Kind: lockfsm.KindOpenSession, Node: lightID, TTLMillis: 2000, Seq: 11}
	require.Equal(t, []lockfsm.Command{open, open}, f.h.proposed, "once, and again after RetryInterval")
	require.Empty(t, r1)
	f.s.OnEvent(&lockfsm.Event{Kind: lockfsm.EventSessionOpened, Node: lightID, Seq: 12, Session: 40})
	require.Empty(t, r1, "another nonce's")
	f.s.OnEvent(&lockfsm.Event{Kind: lockfsm.EventSessionOpened, Node: lightID, Seq: 11, Session: 41})
	for _, r := range []chan *transportpb.FwdOpenResponse{r1, r2, r3} {
		require.Equal(t, uint64(41), (<-r).GetSession())
	}

	// Stepping down answers the calls still waiting with the new leader.
	r4 := make(chan *transportpb.FwdOpenResponse, 1)
	f.s.OpenOnLeader(lightID, 13, 2000, t0, r4)
	f.h.leader = 4
	f.s.StepDown()
	require.Equal(t, uint64(4), (<-r4).GetNotLeader().GetLeader())
}

// ServeStatus answers from the leader's table about the caller's own
// session only, and only once the table is complete.
func TestServeStatus(t *testing.T) {
	const sess = 60
	q := &transportpb.StatusQuery{Seq: 3, Name: "n", Owner: "o"}
	for _, tc := range []struct {
		name      string
		lead      bool
		ready     bool
		notYours  bool
		open      bool
		lock      *lockfsm.LockInfo
		wantHint  bool
		wantErr   bool
		wantState transportpb.AcquireState
		wantToken uint64
	}{
		{name: "not leading", ready: true, wantHint: true},
		{name: "not ready", lead: true, wantHint: true},
		{name: "another's session", lead: true, ready: true, notYours: true, wantErr: true},
		{name: "session not open here", lead: true, ready: true, wantState: transportpb.AcquireState_ACQUIRE_STATE_QUEUED},
		{name: "granted", lead: true, ready: true, open: true,
			lock:      &lockfsm.LockInfo{Holds: []lockfsm.HoldInfo{{Session: sess, Owner: "o", GrantSeq: 3, Token: 8}}},
			wantState: transportpb.AcquireState_ACQUIRE_STATE_GRANTED, wantToken: 8},
		{name: "another acquire granted", lead: true, ready: true, open: true,
			lock:      &lockfsm.LockInfo{Holds: []lockfsm.HoldInfo{{Session: sess, Owner: "o", GrantSeq: 2, Token: 8}}},
			wantState: transportpb.AcquireState_ACQUIRE_STATE_GONE},
		{name: "waiting", lead: true, ready: true, open: true,
			lock:      &lockfsm.LockInfo{Waiters: []lockfsm.WaiterInfo{{Session: sess, Seq: 3}}},
			wantState: transportpb.AcquireState_ACQUIRE_STATE_QUEUED},
		{name: "gone", lead: true, ready: true, open: true, wantState: transportpb.AcquireState_ACQUIRE_STATE_GONE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if tc.lead {
				f.leading()
			}
			f.h.ready, f.h.notYours[sess], f.h.open[sess] = tc.ready, tc.notYours, tc.open
			if tc.lock != nil {
				f.table.locks["n"] = *tc.lock
			}
			resp, err := f.s.ServeStatus(lightID, &transportpb.FwdStatusRequest{Session: sess,
				Queries: []*transportpb.StatusQuery{q}})
			if tc.wantErr {
				require.ErrorIs(t, err, errNotYours)
				return
			}
			require.NoError(t, err)
			if tc.wantHint {
				require.NotNil(t, resp.GetNotLeader())
				require.Empty(t, resp.GetFacts())
				return
			}
			require.Len(t, resp.GetFacts(), 1)
			require.Equal(t, tc.wantState, resp.GetFacts()[0].GetState())
			require.Equal(t, tc.wantToken, resp.GetFacts()[0].GetToken())
		})
	}
}

func TestGrantedTo(t *testing.T) {
	li := lockfsm.LockInfo{Holds: []lockfsm.HoldInfo{{Session: 1, Owner: "a", GrantSeq: 4, Token: 10},
		{Session: 2, Owner: "b", GrantSeq: 0, Token: 11}}}
	require.Equal(t, uint64(10), GrantedTo(li, 1, "a", 4))
	require.Zero(t, GrantedTo(li, 1, "b", 4), "another owner")
	require.Zero(t, GrantedTo(li, 1, "a", 5), "another acquire")
	require.Zero(t, GrantedTo(li, 2, "b", 0), "seq 0 is no acquire")
}
