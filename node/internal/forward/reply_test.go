package forward

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/transport/transportpb"
)

const lightSess = 50 // the light member's session

// leaderWithLight is a ready leader that knows lightID's session.
func leaderWithLight(t *testing.T) *fixture {
	f := newFixture(t)
	f.table.sessions = []lockfsm.SessionInfo{{Session: lightSess, Node: lightID}}
	return f.leading()
}

func acquireCmd(sess, seq uint64) lockfsm.Command {
	return lockfsm.Command{Kind: lockfsm.KindAcquire, Session: sess, Seq: seq, Name: "n", Owner: "o"}
}

func replyChan() chan *transportpb.FwdProposeResponse {
	return make(chan *transportpb.FwdProposeResponse, 1)
}

// ProposeOnLeader: what is proposed, and what the call is answered with at
// once.
func TestProposeOnLeader(t *testing.T) {
	a1, a2 := acquireCmd(lightSess, 1), acquireCmd(lightSess, 2)
	for _, tc := range []struct {
		name     string
		lead     bool
		cmds     []lockfsm.Command
		probe    bool // an empty command first
		refuse   string
		unknown  bool
		admit    error
		wantErr  bool
		wantProp []lockfsm.Command
		// the answer at once (nil: held for results)
		wantReply *transportpb.FwdProposeResponse
	}{
		{name: "not leading", cmds: []lockfsm.Command{a1},
			wantReply: &transportpb.FwdProposeResponse{NotLeader: notLeader(3)}},
		{name: "probe", lead: true, probe: true, wantReply: &transportpb.FwdProposeResponse{}},
		{name: "held for its results", lead: true, cmds: []lockfsm.Command{a1, a2},
			wantProp: []lockfsm.Command{a1, a2}},
		{name: "one refused: none proposed", lead: true, refuse: "bad",
			cmds:    []lockfsm.Command{a1, {Kind: lockfsm.KindAcquire, Session: lightSess, Seq: 3, Name: "bad"}},
			wantErr: true},
		{name: "session unknown yet: held back", lead: true, unknown: true, cmds: []lockfsm.Command{a1},
			wantReply: &transportpb.FwdProposeResponse{}},
		{name: "gate shut: answered with the error", lead: true, admit: errOlder, cmds: []lockfsm.Command{a1},
			wantReply: &transportpb.FwdProposeResponse{Items: []*transportpb.PushItem{
				ResultItem(&a1, lockfsm.Result{Err: errOlder}, 254)}}},
		{name: "sessionless: nothing to wait for", lead: true,
			cmds:     []lockfsm.Command{{Kind: lockfsm.KindCloseSession, Session: 44}},
			wantProp: []lockfsm.Command{{Kind: lockfsm.KindCloseSession, Session: 44}}, wantReply: &transportpb.FwdProposeResponse{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := leaderWithLight(t)
			if !tc.lead {
				f.h.leader = 3
				f.s.StepDown()
			}
			if tc.refuse != "" {
				f.h.refuse[tc.refuse] = errors.New("refused")
			}
			f.h.unknown[lightSess] = tc.unknown
			f.h.admit = tc.admit
			var data [][]byte
			if tc.probe {
				data = append(data, nil)
			}
			for _, c := range tc.cmds {
				data = append(data, enc(c))
			}
			reply := replyChan()
			err := f.s.ProposeOnLeader(lightID, data, t0, reply)
			if tc.wantErr {
				require.Error(t, err)
				require.Empty(t, f.h.proposed)
				require.Empty(t, reply)
				require.False(t, f.s.Holding())
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantProp, f.h.proposed)
			if tc.wantReply == nil {
				require.Empty(t, reply)
				require.True(t, f.s.Holding())
				return
			}
			require.False(t, f.s.Holding())
			got := <-reply
			require.Equal(t, tc.wantReply.GetNotLeader().GetLeader(), got.GetNotLeader().GetLeader())
			requireItems(t, tc.wantReply.GetItems(), got.GetItems())
		})
	}
}

// A held call is answered with the results of its commands and the
// member's events applied with them, in apply order, once every result is
// in and the applied batch ends; nothing of it is pushed.
func TestReplyCarriesResults(t *testing.T) {
	f := leaderWithLight(t)
	a1, a2 := acquireCmd(lightSess, 1), acquireCmd(lightSess, 2)
	reply := replyChan()
	require.NoError(t, f.s.ProposeOnLeader(lightID, [][]byte{enc(a1), enc(a2)}, t0, reply))
	r1 := lockfsm.Result{Status: lockfsm.Granted, Token: 3}
	f.s.OnResult(&a1, r1)
	f.s.FlushReplies()
	require.Empty(t, reply, "a result is missing")
	ev := &lockfsm.Event{Kind: lockfsm.EventReleased, Session: lightSess, Name: "m", Token: 2}
	f.s.OnEvent(ev)
	r2 := lockfsm.Result{Status: lockfsm.Queued}
	f.s.OnResult(&a2, r2)
	require.Empty(t, reply, "answered at the end of the batch")
	f.s.FlushReplies()
	requireItems(t, []*transportpb.PushItem{ResultItem(&a1, r1, 0), EventItem(ev), ResultItem(&a2, r2, 0)},
		(<-reply).GetItems())
	require.False(t, f.s.Holding())
	require.Empty(t, f.pushes())
	// Later items are pushed.
	f.s.OnEvent(ev)
	requireItems(t, []*transportpb.PushItem{EventItem(ev)}, f.pushes()[lightID])
}

// A held call is answered after ReplyWait with what it has (the rest is
// pushed), when the member calls again, and when the leader steps down.
func TestReplyEnds(t *testing.T) {
	a1, a2 := acquireCmd(lightSess, 1), acquireCmd(lightSess, 2)
	r1 := lockfsm.Result{Status: lockfsm.Granted, Token: 3}
	for _, tc := range []struct {
		name string
		end  func(f *fixture) // ends the held call
		late bool             // a result applied later is pushed
	}{
		{"waited", func(f *fixture) {
			f.s.ExpireReplies(t0.Add(f.s.ReplyWait() - 1))
			require.True(t, f.s.Holding())
			f.s.ExpireReplies(t0.Add(f.s.ReplyWait()))
		}, true},
		{"called again", func(f *fixture) {
			require.NoError(t, f.s.ProposeOnLeader(lightID, [][]byte{enc(acquireCmd(lightSess, 3))}, t0, replyChan()))
			require.True(t, f.s.Holding(), "the new call is held")
		}, false},
		{"stepped down", func(f *fixture) { f.s.StepDown() }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := leaderWithLight(t)
			reply := replyChan()
			require.NoError(t, f.s.ProposeOnLeader(lightID, [][]byte{enc(a1), enc(a2)}, t0, reply))
			f.s.OnResult(&a1, r1)
			tc.end(f)
			requireItems(t, []*transportpb.PushItem{ResultItem(&a1, r1, 0)}, (<-reply).GetItems())
			f.s.OnResult(&a2, lockfsm.Result{Status: lockfsm.Queued})
			f.s.FlushReplies()
			if tc.late {
				require.Len(t, f.pushes()[lightID], 1, "the late result is pushed")
			} else {
				require.Empty(t, f.pushes(), "not leading, or in the new call's reply")
			}
		})
	}
}

// While an earlier push to the member is still queued or in flight, the
// reply's items go behind it, and the reply carries none.
func TestReplyBehindPush(t *testing.T) {
	f := leaderWithLight(t)
	early := &lockfsm.Event{Kind: lockfsm.EventReleased, Session: lightSess, Name: "early"}
	f.s.OnEvent(early) // queued, its sender not run yet
	a1 := acquireCmd(lightSess, 1)
	reply := replyChan()
	require.NoError(t, f.s.ProposeOnLeader(lightID, [][]byte{enc(a1)}, t0, reply))
	r1 := lockfsm.Result{Status: lockfsm.Granted, Token: 3}
	f.s.OnResult(&a1, r1)
	f.s.FlushReplies()
	require.Empty(t, (<-reply).GetItems())
	requireItems(t, []*transportpb.PushItem{EventItem(early), ResultItem(&a1, r1, 0)}, f.pushes()[lightID])
}

// The result of a CloseSession a light member forwarded for a session the
// leader does not count as a light member's (an earlier incarnation's)
// reaches that member, once.
func TestCloseSessionResultReachesCloser(t *testing.T) {
	f := leaderWithLight(t)
	closeOld := lockfsm.Command{Kind: lockfsm.KindCloseSession, Session: 44, Seq: 1}
	reply := replyChan()
	require.NoError(t, f.s.ProposeOnLeader(lightID, [][]byte{enc(closeOld)}, t0, reply))
	res := lockfsm.Result{Status: lockfsm.Granted}
	f.s.OnResult(&closeOld, res)
	f.s.FlushReplies()
	requireItems(t, []*transportpb.PushItem{ResultItem(&closeOld, res, 0)}, (<-reply).GetItems())
	f.s.OnResult(&closeOld, res)
	require.Empty(t, f.pushes(), "once")
}
