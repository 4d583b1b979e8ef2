package forward

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/transport/transportpb"
)

func member(id uint64, st membership.State, data bool) membership.Member {
	return membership.Member{State: st, Meta: membership.Meta{RaftID: id, HasData: data}}
}

// Target: the leader if known, else the alive members with raft data in
// turn, never this node.
func TestTarget(t *testing.T) {
	all := []membership.Member{member(self, membership.StateAlive, true), member(2, membership.StateAlive, true),
		member(4, membership.StateFailed, true), member(5, membership.StateAlive, false), member(3, membership.StateAlive, true)}
	for _, tc := range []struct {
		name    string
		seen    uint64
		members []membership.Member
		want    []uint64 // successive calls
	}{
		{"leader known", 7, all, []uint64{7, 7}},
		{"no gossip", 0, nil, []uint64{0}},
		{"nobody with data", 0, all[2:4], []uint64{0}},
		{"in turn", 0, all, []uint64{3, 2, 3, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.h.seen, f.h.members = tc.seen, tc.members
			var got []uint64
			for range tc.want {
				got = append(got, f.s.Target())
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// Every answer tells a light member about its leader: an answer follows
// the one who gave it, an error forgets it, a hint follows the hint; raft's
// own leader wins.
func TestLeaderFromAnswers(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		light                bool
		leader, raft, target uint64
		hint                 *transportpb.LeaderHint
		err                  error
		wantOK               bool
		wantSet              []uint64
	}{
		{name: "answer finds it", light: true, target: 3, wantOK: true, wantSet: []uint64{3}},
		{name: "answer from the leader followed", light: true, leader: 3, target: 3, wantOK: true},
		{name: "raft member", target: 3, wantOK: true},
		{name: "raft follows another", light: true, raft: 4, target: 3, wantOK: true},
		{name: "error forgets it", light: true, leader: 3, target: 3, err: errors.New("down"), wantSet: []uint64{0}},
		{name: "error from another", light: true, leader: 4, target: 3, err: errors.New("down")},
		{name: "error, raft follows it", light: true, leader: 3, raft: 3, target: 3, err: errors.New("down")},
		{name: "hint", light: true, leader: 3, target: 3, hint: notLeader(4), wantSet: []uint64{0, 4}},
		{name: "hint from a candidate", light: true, target: 3, hint: notLeader(4), wantSet: []uint64{4}},
		{name: "empty hint", light: true, leader: 3, target: 3, hint: notLeader(0), wantSet: []uint64{0}},
		{name: "hint names this node", light: true, target: 3, hint: notLeader(self)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.h.light, f.h.leader, f.h.raft = tc.light, tc.leader, tc.raft
			f.s.statusAt, f.s.waitedAt = t0, t0
			require.Equal(t, tc.wantOK, f.s.answered(tc.target, tc.hint, tc.err))
			f.h.settle()
			require.Equal(t, tc.wantSet, f.h.setLeader)
			if slices.ContainsFunc(tc.wantSet, func(id uint64) bool { return id != 0 }) {
				require.True(t, f.s.statusAt.IsZero() && f.s.waitedAt.IsZero(), "a new leader is asked at once")
				require.True(t, f.s.observeDue, "observers subscribe with the new leader")
			} else {
				require.Equal(t, t0, f.s.statusAt)
			}
		})
	}
}

// Commands queued before the sender runs go in one call; the items of its
// reply are handed to the member as a push.
func TestForwardBatches(t *testing.T) {
	f := newFixture(t).lightMember()
	item := EventItem(&lockfsm.Event{Kind: lockfsm.EventGranted, Session: 77, Seq: 1, Token: 3, FromQueue: true})
	f.net.propose = func(uint64, *transportpb.FwdProposeRequest) (*transportpb.FwdProposeResponse, error) {
		return &transportpb.FwdProposeResponse{Items: []*transportpb.PushItem{item}}, nil
	}
	a := []byte("a")
	f.s.Forward(a)
	a[0] = 'x' // the caller's buffer is its own again
	f.s.Forward([]byte("b"))
	f.s.Forward([]byte("c"))
	require.True(t, f.s.Forwarding())
	f.h.settle()
	require.False(t, f.s.Forwarding())
	calls := f.net.take()
	require.Len(t, calls, 1)
	require.Equal(t, uint64(leaderID), calls[0].to)
	require.Equal(t, [][]byte{[]byte("a"), []byte("b"), []byte("c")}, calls[0].req.(*transportpb.FwdProposeRequest).GetCommands())
	require.Equal(t, [][]*transportpb.PushItem{{item}}, f.h.pushed)

	// A reply with no items is no push.
	f.net.propose = nil
	f.s.Forward([]byte("d"))
	f.h.settle()
	require.Len(t, f.net.take(), 1)
	require.Len(t, f.h.pushed, 1)
}

func TestForwardDrops(t *testing.T) {
	t.Run("nobody to ask", func(t *testing.T) {
		f := newFixture(t).lightMember()
		f.h.leader, f.h.seen = 0, 0
		f.s.Forward([]byte("a"))
		f.h.settle()
		require.Empty(t, f.net.take(), "retried on the retry timer")
	})
	t.Run("stopped", func(t *testing.T) {
		f := newFixture(t).lightMember()
		f.s.Forward([]byte("a"))
		close(f.stop)
		f.h.settle()
		require.Empty(t, f.net.take())
		require.False(t, f.s.Forwarding())
	})
	t.Run("queue full", func(t *testing.T) {
		f := newFixture(t).lightMember()
		for range maxQueue + 5 {
			f.s.Forward([]byte("a"))
		}
		f.h.settle()
		calls := f.net.take()
		require.Len(t, calls, 1)
		require.Len(t, calls[0].req.(*transportpb.FwdProposeRequest).GetCommands(), maxQueue)
	})
}

// A member without a leader probes one candidate every RetryInterval with
// an empty command; the one that answers is the leader.
func TestTickProbesForLeader(t *testing.T) {
	f := newFixture(t)
	f.h.light = true
	f.h.members = []membership.Member{member(3, membership.StateAlive, true)}
	f.s.Tick(t0)
	f.s.Tick(t0.Add(retry / 2))
	f.h.settle()
	calls := f.net.take()
	require.Len(t, calls, 1, "one probe per RetryInterval")
	require.Equal(t, uint64(3), calls[0].to)
	require.Equal(t, [][]byte{nil}, calls[0].req.(*transportpb.FwdProposeRequest).GetCommands())
	require.Equal(t, []uint64{3}, f.h.setLeader)
	require.Empty(t, f.h.pushed)
	f.h.leader, f.h.seen = 0, 0
	f.s.Tick(t0.Add(retry))
	f.h.settle()
	require.Len(t, f.net.take(), 1)
}

// What a light member asks the leader about: queued Acquires every
// WaitCheck (their grant comes by push), in-flight Acquires whose result
// is overdue by RetryInterval.
func TestStatusQueries(t *testing.T) {
	now := t0.Add(time.Hour)
	acq := func(seq uint64) Op {
		return Op{Seq: seq, Kind: lockfsm.KindAcquire, Name: "n", Owner: "o", FirstProposed: now.Add(-retry)}
	}
	for _, tc := range []struct {
		name      string
		waited    time.Duration // since the last time the queued were asked
		queued    []Op
		inflight  []Op
		want      []uint64
		askQueued bool
	}{
		{name: "queued, due", waited: ttl / 4, queued: []Op{acq(1)}, want: []uint64{1}, askQueued: true},
		{name: "queued, not due", waited: ttl/4 - 1, queued: []Op{acq(1)}},
		{name: "overdue", waited: 0, inflight: []Op{acq(2)}, want: []uint64{2}},
		{name: "not overdue", inflight: []Op{func() Op { o := acq(2); o.FirstProposed = now.Add(-retry + 1); return o }()}},
		{name: "never proposed", inflight: []Op{func() Op { o := acq(2); o.FirstProposed = time.Time{}; return o }()}},
		{name: "parked", inflight: []Op{func() Op { o := acq(2); o.Parked = true; return o }()}},
		{name: "abandoned", inflight: []Op{func() Op { o := acq(2); o.Abandoned = true; return o }()}},
		{name: "not an acquire", inflight: []Op{func() Op { o := acq(2); o.Kind = lockfsm.KindRelease; return o }()}},
		{name: "both", waited: time.Hour, queued: []Op{acq(1), acq(3)}, inflight: []Op{acq(2)}, want: []uint64{1, 2, 3},
			askQueued: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t).lightMember()
			f.s.waitedAt = now.Add(-tc.waited)
			for _, o := range tc.queued {
				f.h.queued[o.Seq] = o
			}
			for _, o := range tc.inflight {
				f.h.inflight[o.Seq] = o
			}
			req, seqs, askQueued := f.s.statusQueries(now, 77)
			require.Equal(t, tc.askQueued, askQueued)
			require.Equal(t, uint64(77), req.GetSession())
			require.Len(t, req.GetQueries(), len(seqs))
			for i, q := range req.GetQueries() {
				require.Equal(t, seqs[i], q.GetSeq())
				require.Equal(t, "n", q.GetName())
				require.Equal(t, "o", q.GetOwner())
			}
			slices.Sort(seqs)
			require.Equal(t, tc.want, seqs)
		})
	}
}

// Tick sends the status call to the leader at most every RetryInterval,
// and hands the answer to the member in the loop.
func TestTickAsksStatus(t *testing.T) {
	f := newFixture(t).lightMember()
	f.h.queued[4] = Op{Seq: 4, Kind: lockfsm.KindAcquire, Name: "n", Owner: "o"}
	f.net.status = func(uint64, *transportpb.FwdStatusRequest) (*transportpb.FwdStatusResponse, error) {
		return &transportpb.FwdStatusResponse{Facts: []*transportpb.StatusFact{{State: transportpb.AcquireState_ACQUIRE_STATE_QUEUED}}}, nil
	}
	f.s.Tick(t0)
	f.s.Tick(t0.Add(retry - 1))
	f.h.settle()
	calls := f.net.take()
	require.Len(t, calls, 1)
	require.Equal(t, "FwdStatus", calls[0].method)
	require.Equal(t, uint64(leaderID), calls[0].to)
	require.Equal(t, 1, f.h.answers)
	// Asked about the queued one: not again before WaitCheck, though
	// RetryInterval passed.
	f.s.Tick(t0.Add(retry))
	f.h.settle()
	require.Empty(t, f.net.take())
	f.s.Tick(t0.Add(f.s.WaitCheck()))
	f.h.settle()
	require.Len(t, f.net.take(), 1)
	// No session: nothing to ask about.
	f.h.session = 0
	f.s.Tick(t0.Add(time.Hour))
	f.h.settle()
	require.Empty(t, f.net.take())
	// A leader that failed the call is forgotten.
	f.h.session = 77
	f.net.status = func(uint64, *transportpb.FwdStatusRequest) (*transportpb.FwdStatusResponse, error) {
		return nil, errors.New("down")
	}
	answers := f.h.answers
	f.s.Tick(t0.Add(2 * time.Hour))
	f.h.settle()
	require.Equal(t, answers, f.h.answers)
	require.Equal(t, []uint64{0}, f.h.setLeader)
}

// ApplyStatus: what each fact means for the Acquire asked about.
func TestApplyStatus(t *testing.T) {
	const (
		granted = transportpb.AcquireState_ACQUIRE_STATE_GRANTED
		queued  = transportpb.AcquireState_ACQUIRE_STATE_QUEUED
		gone    = transportpb.AcquireState_ACQUIRE_STATE_GONE
	)
	acq := Op{Seq: 5, Kind: lockfsm.KindAcquire, Name: "n", Owner: "o"}
	for _, tc := range []struct {
		name       string
		inflight   *Op
		queued     *Op
		st         transportpb.AcquireState
		wantResult *lockfsm.Result
		wantEvent  *lockfsm.Event
	}{
		{name: "result lost: granted", inflight: &acq, st: granted,
			wantResult: &lockfsm.Result{Status: lockfsm.Granted, Token: 9, Duplicate: true}},
		{name: "result lost: queued", inflight: &acq, st: queued, wantResult: &lockfsm.Result{Status: lockfsm.Queued}},
		{name: "in flight, gone", inflight: &acq, st: gone},
		{name: "parked", inflight: &Op{Seq: 5, Kind: lockfsm.KindAcquire, Parked: true}, st: granted},
		{name: "abandoned", inflight: &Op{Seq: 5, Kind: lockfsm.KindAcquire, Abandoned: true}, st: granted},
		{name: "not an acquire", inflight: &Op{Seq: 5, Kind: lockfsm.KindRelease}, st: granted},
		{name: "grant missed", queued: &acq, st: granted, wantEvent: &lockfsm.Event{Kind: lockfsm.EventGranted,
			Session: 77, Seq: 5, Name: "n", Owner: "o", Token: 9, FromQueue: true}},
		{name: "wait ended", queued: &acq, st: gone, wantEvent: &lockfsm.Event{Kind: lockfsm.EventWaitEnded,
			Session: 77, Seq: 5, Name: "n", Owner: "o", Reason: lockfsm.ReasonSessionExpired}},
		{name: "still queued", queued: &acq, st: queued},
		{name: "unknown", st: granted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t).lightMember()
			if tc.inflight != nil {
				f.h.inflight[5] = *tc.inflight
			}
			if tc.queued != nil {
				f.h.queued[5] = *tc.queued
			}
			f.s.ApplyStatus(77, []uint64{5}, []*transportpb.StatusFact{{State: tc.st, Token: 9}})
			if tc.wantResult != nil {
				require.Equal(t, []relearn{{5, *tc.wantResult}}, f.h.relearnt)
			} else {
				require.Empty(t, f.h.relearnt)
			}
			if tc.wantEvent != nil {
				require.Equal(t, []lockfsm.Event{*tc.wantEvent}, f.h.events)
			} else {
				require.Empty(t, f.h.events)
			}
		})
	}
	t.Run("fewer facts than asked", func(t *testing.T) {
		f := newFixture(t).lightMember()
		f.h.queued[5], f.h.queued[6] = acq, Op{Seq: 6, Kind: lockfsm.KindAcquire}
		f.s.ApplyStatus(77, []uint64{5, 6}, []*transportpb.StatusFact{{State: granted, Token: 9}})
		require.Len(t, f.h.events, 1)
	})
}

// Open asks for the session in the background; the session found is
// handed to the member in the loop, and the one who answered is the
// leader.
func TestOpen(t *testing.T) {
	for _, tc := range []struct {
		name       string
		resp       *transportpb.FwdOpenResponse
		err        error
		wantOpened [][2]uint64
		wantSet    []uint64
	}{
		{name: "opened", resp: &transportpb.FwdOpenResponse{Session: 42}, wantOpened: [][2]uint64{{11, 42}},
			wantSet: []uint64{3}},
		{name: "not the leader", resp: &transportpb.FwdOpenResponse{NotLeader: notLeader(4)}, wantSet: []uint64{4}},
		{name: "no session", resp: &transportpb.FwdOpenResponse{}, wantSet: []uint64{3}},
		{name: "failed", err: errors.New("down")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.h.light = true
			f.net.open = func(uint64, *transportpb.FwdOpenRequest) (*transportpb.FwdOpenResponse, error) {
				return tc.resp, tc.err
			}
			f.s.Open(11, 3)
			f.h.settle()
			calls := f.net.take()
			require.Len(t, calls, 1)
			require.Equal(t, uint64(3), calls[0].to)
			req := calls[0].req.(*transportpb.FwdOpenRequest)
			require.Equal(t, uint64(11), req.GetNonce())
			require.Equal(t, uint64(ttl.Milliseconds()), req.GetTtlMillis())
			require.Equal(t, tc.wantOpened, f.h.opened)
			require.Equal(t, tc.wantSet, f.h.setLeader)
		})
	}
}
