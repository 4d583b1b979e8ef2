package fleet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/membership"
)

const testFormation = "0123456789abcdef0123456789abcdef"

// leaderOfThree is node 1 leading voters 1, 2, 3 (all caught up at 10) in
// term 7, with members as its gossip view.
func leaderOfThree(t *testing.T, members *[]membership.Member) (*Fleet, *fakeHost) {
	t.Helper()
	g := &membership.Config{Founders: []string{"m1", "m2", "m3"}, Thresholds: membership.Thresholds{
		StabilizeFor: time.Second, DeadVoterAfter: 5 * time.Second, DeadLearnerAfter: 3 * time.Second, MaxLearners: 1}}
	f, h := newTestFleet(t, g, nil, members)
	f.formation = testFormation
	h.lead = Leadership{Leader: 1, Leading: true, Active: true, Term: 7}
	h.conf = &raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	h.status.Progress = progress(10, h.conf.Voters)
	h.applied = 10
	return f, h
}

func threeAnd(extra ...membership.Member) *[]membership.Member {
	ms := []membership.Member{member(1, membership.StateAlive, true, testFormation),
		member(2, membership.StateAlive, true, testFormation), member(3, membership.StateAlive, true, testFormation)}
	ms = append(ms, extra...)
	return &ms
}

func changeOf(t *testing.T, cc *raftpb.ConfChangeV2) (raftpb.ConfChangeType, uint64) {
	t.Helper()
	require.Len(t, cc.GetChanges(), 1)
	return cc.GetChanges()[0].GetType(), cc.GetChanges()[0].GetNodeId()
}

// A light member alive for StabilizeFor is added as a learner, one change
// at a time: nothing more is proposed until the change applies.
func TestReconcileAddsStableMemberAsLearner(t *testing.T) {
	f, h := leaderOfThree(t, threeAnd(member(4, membership.StateAlive, false, "")))
	t0 := time.Now()
	f.reconcileAt(t0, 7)
	require.Empty(t, h.proposed, "not stable yet")
	f.reconcileAt(t0.Add(1500*time.Millisecond), 7)
	require.Len(t, h.proposed, 1)
	typ, id := changeOf(t, h.proposed[0])
	require.Equal(t, raftpb.ConfChangeAddLearnerNode, typ)
	require.Equal(t, uint64(4), id)
	require.Equal(t, "addr4", string(h.proposed[0].GetContext()), "the new member's address rides along")

	f.reconcileAt(t0.Add(2*time.Second), 7)
	require.Len(t, h.proposed, 1, "the change is pending")
	f.OnConfChange(h.proposed[0])
	require.Equal(t, "addr4", h.net.peers[4])
	require.Equal(t, 1, h.wakes, "an applied change asks for the next step at once")
	require.Nil(t, f.rec.pending)
}

// A pending change that never applies is planned again after five election
// timeouts.
func TestReconcilePendingExpires(t *testing.T) {
	f, h := leaderOfThree(t, threeAnd(member(4, membership.StateAlive, false, "")))
	t0 := time.Now()
	f.reconcileAt(t0, 7)
	f.reconcileAt(t0.Add(1500*time.Millisecond), 7)
	require.Len(t, h.proposed, 1)
	f.reconcileAt(t0.Add(6*time.Second), 7)
	require.Len(t, h.proposed, 1, "still within 5 election timeouts of the proposal")
	f.reconcileAt(t0.Add(7*time.Second), 7)
	require.Len(t, h.proposed, 2, "planned again")
}

// Only an active leader that is not closing reconciles.
func TestReconcileOnlyOnActiveLeader(t *testing.T) {
	f, h := leaderOfThree(t, threeAnd(member(4, membership.StateAlive, false, "")))
	for _, l := range []Leadership{{Leader: 2}, {Leader: 1, Leading: true, Term: 7}} {
		h.lead = l
		f.reconcile()
		require.Empty(t, f.rec.marks.ByID, "not an active leader: no marks taken")
	}
	h.lead = Leadership{Leader: 1, Leading: true, Active: true, Term: 7}
	h.closing = true
	f.reconcile()
	require.Empty(t, f.rec.marks.ByID)
	h.closing = false
	f.reconcile()
	require.Contains(t, f.rec.marks.ByID, uint64(4))
}

// A voter failed in gossip and in raft for DeadVoterAfter is replaced by a
// ready learner; a health mark left from an earlier term does not count
// (the leader starts its clocks afresh each term).
func TestReconcileReplacesDeadVoterOnMarksOfThisTerm(t *testing.T) {
	for _, tc := range []struct {
		name     string
		markTerm uint64
		replaced bool
	}{{"mark of this term", 7, true}, {"mark of an earlier term", 6, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ms := threeAnd(member(4, membership.StateAlive, true, testFormation))
			(*ms)[1].State = membership.StateFailed
			f, h := leaderOfThree(t, ms)
			h.conf.Learners = []uint64{4}
			h.status.Progress = progress(10, []uint64{1, 3}, 4)
			h.status.Progress[2] = progress(10, []uint64{2})[2]
			pr := h.status.Progress[2]
			pr.RecentActive = false
			h.status.Progress[2] = pr
			now := time.Now()
			f.rec.marks = Marks{Term: tc.markTerm, ByID: map[uint64]HealthMark{
				2: {Healthy: false, Role: 2, Since: now.Add(-time.Hour)},
				4: {Healthy: true, Role: 1, Since: now.Add(-time.Hour)},
			}}
			f.reconcileAt(now, 7)
			if !tc.replaced {
				require.Empty(t, h.proposed)
				require.Equal(t, uint64(7), f.rec.marks.Term)
				require.Equal(t, now, f.rec.marks.ByID[2].Since, "the clock starts now")
				return
			}
			require.Len(t, h.proposed, 1)
			typ, id := changeOf(t, h.proposed[0])
			require.Equal(t, raftpb.ConfChangeRemoveNode, typ)
			require.Equal(t, uint64(2), id)
		})
	}
}

// A member of another formation is ignored: never added, never told.
func TestReconcileIgnoresForeignFormation(t *testing.T) {
	other := "fedcba9876543210fedcba9876543210"
	f, h := leaderOfThree(t, threeAnd(member(5, membership.StateAlive, true, other), member(6, membership.StateAlive, false, other)))
	t0 := time.Now()
	f.reconcileAt(t0, 7)
	f.reconcileAt(t0.Add(2*time.Second), 7)
	require.Empty(t, h.proposed)
	require.Empty(t, h.reads, "no removal round for a foreign member")
	require.True(t, f.rec.foreign[5] && f.rec.foreign[6])
}

// A member with raft data outside the configuration is told it was removed
// only after a confirmed ReadIndex whose index is applied.
func TestReconcileTellsRemovedAfterConfirmedRead(t *testing.T) {
	f, h := leaderOfThree(t, threeAnd(member(6, membership.StateAlive, true, testFormation)))
	t0 := time.Now()
	f.reconcileAt(t0, 7)
	require.Len(t, h.reads, 1, "a removal round starts")
	f.reconcileAt(t0.Add(100*time.Millisecond), 7)
	require.Len(t, h.reads, 1, "one round at a time")

	f.ReadStates([]raft.ReadState{{Index: 12, RequestCtx: h.reads[0]}})
	require.Equal(t, 1, h.wakes)
	f.reconcileAt(t0.Add(200*time.Millisecond), 7)
	select {
	case <-h.net.removed:
		t.Fatal("told before the read's index was applied")
	default:
	}
	h.applied = 12
	h.status.HardState = &raftpb.HardState{Term: new(uint64(7))}
	f.reconcileAt(t0.Add(300*time.Millisecond), 7)
	select {
	case req := <-h.net.removed:
		require.Equal(t, uint64(7), req.GetTerm())
		require.Equal(t, uint64(12), req.GetApplied())
		require.Equal(t, []uint64{1, 2, 3}, req.GetVoters())
	case <-time.After(5 * time.Second):
		t.Fatal("not told")
	}
	f.reconcileAt(t0.Add(time.Second), 7)
	require.Len(t, h.reads, 1, "told at most every 10 s: no new round")
}

// A removal round of an earlier term is dropped.
func TestRemovalRoundOfEarlierTermDropped(t *testing.T) {
	f, h := leaderOfThree(t, threeAnd(member(6, membership.StateAlive, true, testFormation)))
	t0 := time.Now()
	f.reconcileAt(t0, 7)
	f.ReadStates([]raft.ReadState{{Index: 12, RequestCtx: h.reads[0]}})
	h.applied = 12
	f.reconcileAt(t0.Add(100*time.Millisecond), 8)
	require.Len(t, h.reads, 2, "the new term asks again")
	select {
	case <-h.net.removed:
		t.Fatal("told on a read of another term")
	default:
	}
}

// A leaving member's removal: refused off the leader or while another
// change is pending, answered at once for a non-member, else proposed and
// answered when it applies.
func TestProposeRemoval(t *testing.T) {
	f, h := leaderOfThree(t, threeAnd())
	res := make(chan error, 4)
	h.lead.Leading = false
	f.ProposeRemoval(3, res)
	require.ErrorIs(t, <-res, errUnavailable)
	h.lead.Leading = true

	f.ProposeRemoval(9, res)
	require.NoError(t, <-res, "not a member: nothing to do")

	require.True(t, f.ClaimRemoval(2, false, time.Now()))
	f.ProposeRemoval(3, res)
	require.ErrorIs(t, <-res, errUnavailable, "another change is pending")
	require.False(t, f.ClaimRemoval(3, false, time.Now()))
	f.rec.pending = nil

	f.ProposeRemoval(3, res)
	f.ProposeRemoval(3, res) // asked again: the same removal
	require.Len(t, h.proposed, 1)
	require.Empty(t, res)
	f.OnConfChange(h.proposed[0])
	require.NoError(t, <-res)
	require.NoError(t, <-res)
	require.True(t, f.rec.left[3], "its removed notice is routine")
	require.False(t, f.members.Allows(3), "a removed member is barred")
}

// Without gossip, an operator's removal needs no claim, and Leave's
// waiters are still answered.
func TestStaticModeRemoval(t *testing.T) {
	f, h := newTestFleet(t, nil, []Member{{1, "a"}, {2, "b"}, {3, "c"}}, nil)
	h.lead = Leadership{Leader: 1, Leading: true, Active: true, Term: 2}
	h.conf = &raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	require.True(t, f.ClaimRemoval(2, false, time.Now()))
	require.True(t, f.ClaimRemoval(3, false, time.Now()))
	res := make(chan error, 1)
	f.ProposeRemoval(3, res)
	f.OnConfChange(h.proposed[0])
	require.NoError(t, <-res)
	require.Zero(t, h.wakes, "nothing reconciles without gossip")
	f.reconcile()
	require.Len(t, h.proposed, 1)
}
