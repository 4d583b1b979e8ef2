package membership

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var th = Thresholds{StabilizeFor: 10 * time.Second, DeadVoterAfter: time.Minute, DeadLearnerAfter: 30 * time.Second, MaxLag: 100, MaxLearners: 2, MaxVoters: 5}

// ok is a healthy, caught-up, long-stable member.
func ok(id uint64) MemberHealth {
	return MemberHealth{RaftID: id, Gossip: StateAlive, RecentActive: true, Match: 1000, HealthyFor: time.Hour}
}

// dead is a member failed in gossip and inactive in raft for d.
func dead(id uint64, d time.Duration) MemberHealth {
	return MemberHealth{RaftID: id, Gossip: StateFailed, Match: 500, UnhealthyFor: d}
}

func newcomer(id uint64, stable time.Duration) MemberHealth {
	return MemberHealth{RaftID: id, Gossip: StateAlive, HealthyFor: stable}
}

func TestTargetVoters(t *testing.T) {
	for _, c := range []struct{ members, max, want int }{
		{0, 0, 3}, {1, 0, 3}, {3, 0, 3}, {4, 0, 3}, {5, 0, 5}, {7, 0, 5}, {100, 0, 5},
		{7, 7, 7}, {6, 7, 5}, {100, 7, 7}, {100, 9, 7}, {100, 6, 5}, {100, 3, 3}, {100, 1, 3},
	} {
		got := targetVoters(c.members, c.max)
		require.Equal(t, c.want, got, "%+v", c)
		require.Equal(t, 1, got%2)
	}
}

func TestPlanVoters(t *testing.T) {
	cases := []struct {
		name string
		in   PlanInput
		want ChangeKind
		id   uint64
	}{
		{"steady 3 of 3", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3}, Members: []MemberHealth{ok(1), ok(2), ok(3)}}, NoChange, 0},
		{"pending blocks everything", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3}, Pending: true,
			Members: []MemberHealth{ok(1), ok(2), ok(3), dead(4, time.Hour), newcomer(5, time.Hour)}, Learners: []uint64{4}}, NoChange, 0},
		{"newcomer stable is added as learner", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3},
			Members: []MemberHealth{ok(1), ok(2), ok(3), newcomer(4, time.Minute)}}, AddLearner, 4},
		{"flapping newcomer not added", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3},
			Members: []MemberHealth{ok(1), ok(2), ok(3), newcomer(4, 9*time.Second)}}, NoChange, 0},
		{"newcomer with data never added", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3},
			Members: []MemberHealth{ok(1), ok(2), ok(3), {RaftID: 4, Gossip: StateAlive, HasData: true, HealthyFor: time.Hour}}}, NoChange, 0},
		{"removed id never re-added", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3}, Removed: []uint64{4},
			Members: []MemberHealth{ok(1), ok(2), ok(3), newcomer(4, time.Hour)}}, NoChange, 0},
		{"most stable newcomer first", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3},
			Members: []MemberHealth{ok(1), ok(2), ok(3), newcomer(4, time.Minute), newcomer(5, time.Hour)}}, AddLearner, 5},
		{"no third learner", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3}, Learners: []uint64{4, 5},
			Members: []MemberHealth{ok(1), ok(2), ok(3), ok(4), ok(5), newcomer(6, time.Hour), newcomer(7, time.Hour)}}, PromoteLearner, 4},
		{"fleet beyond standbys stays light", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3, 4, 5}, Learners: []uint64{6, 7},
			Members: []MemberHealth{ok(1), ok(2), ok(3), ok(4), ok(5), ok(6), ok(7), newcomer(8, time.Hour), newcomer(9, time.Hour)}}, NoChange, 0},
		{"surplus learner removed", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3, 4, 5}, Learners: []uint64{6, 7, 8},
			Members: []MemberHealth{ok(1), ok(2), ok(3), ok(4), ok(5), ok(6), ok(7), {RaftID: 8, Gossip: StateAlive, RecentActive: true, Match: 1000, HealthyFor: time.Second}}}, RemoveLearner, 8},
		{"4 members: learner not promoted past 3", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3}, Learners: []uint64{4},
			Members: []MemberHealth{ok(1), ok(2), ok(3), ok(4)}}, NoChange, 0},
		{"5 members: ready learner promoted", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3}, Learners: []uint64{4, 5},
			Members: []MemberHealth{ok(1), ok(2), ok(3), ok(4), ok(5)}}, PromoteLearner, 4},
		{"flapping learner not promoted", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3}, Learners: []uint64{4, 5},
			Members: []MemberHealth{ok(1), ok(2), ok(3), {RaftID: 4, Gossip: StateAlive, RecentActive: true, Match: 1000, HealthyFor: 3 * time.Second},
				{RaftID: 5, Gossip: StateAlive, RecentActive: true, Match: 1000, HealthyFor: 9 * time.Second}}}, NoChange, 0},
		{"lagging learner not promoted", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3}, Learners: []uint64{4}, LastIndex: 1000,
			Members: []MemberHealth{ok(1), ok(2), ok(3), {RaftID: 4, Gossip: StateAlive, RecentActive: true, Match: 800, HealthyFor: time.Hour}, newcomer(5, 0)}}, NoChange, 0},
		{"caught-up learner within lag promoted", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3}, Learners: []uint64{4}, LastIndex: 1000,
			Members: []MemberHealth{ok(1), ok(2), ok(3), {RaftID: 4, Gossip: StateAlive, RecentActive: true, Match: 950, HealthyFor: time.Hour}, newcomer(5, 0)}}, PromoteLearner, 4},
		{"dead voter before threshold kept", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3}, Learners: []uint64{4},
			Members: []MemberHealth{ok(1), ok(2), dead(3, 59*time.Second), ok(4)}}, NoChange, 0},
		{"dead voter after threshold replaced", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3}, Learners: []uint64{4},
			Members: []MemberHealth{ok(1), ok(2), dead(3, time.Minute), ok(4)}}, RemoveVoter, 3},
		{"dead voter, no ready learner, voters == target: kept", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3},
			Members: []MemberHealth{ok(1), ok(2), dead(3, time.Hour)}}, NoChange, 0},
		{"dead voter, voters above target: removed", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3, 4, 5},
			Members: []MemberHealth{ok(1), ok(2), ok(3), dead(4, time.Hour), dead(5, 2*time.Hour)}}, RemoveVoter, 5},
		{"gossip dead but raft active: kept", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3}, Learners: []uint64{4},
			Members: []MemberHealth{ok(1), ok(2), {RaftID: 3, Gossip: StateFailed, RecentActive: true, Match: 1000, UnhealthyFor: time.Hour}, ok(4)}}, NoChange, 0},
		{"raft inactive but gossip alive: kept", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3}, Learners: []uint64{4},
			Members: []MemberHealth{ok(1), ok(2), {RaftID: 3, Gossip: StateAlive, UnhealthyFor: time.Hour}, ok(4)}}, NoChange, 0},
		{"two of three dead: never below quorum", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3}, Learners: []uint64{4},
			Members: []MemberHealth{ok(1), dead(2, time.Hour), dead(3, time.Hour), ok(4)}}, NoChange, 0},
		{"two of five dead: one removed", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3, 4, 5}, Learners: []uint64{6},
			Members: []MemberHealth{ok(1), ok(2), ok(3), dead(4, time.Hour), dead(5, time.Hour), ok(6)}}, RemoveVoter, 4},
		{"three of five dead: never below quorum", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3, 4, 5}, Learners: []uint64{6},
			Members: []MemberHealth{ok(1), ok(2), dead(3, time.Hour), dead(4, time.Hour), dead(5, time.Hour), ok(6)}}, NoChange, 0},
		{"voter missing from gossip view: untouched", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3}, Learners: []uint64{4},
			Members: []MemberHealth{ok(1), ok(2), ok(4)}}, NoChange, 0},
		{"leader never removed", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3, 4, 5},
			Members: []MemberHealth{dead(1, time.Hour), ok(2), ok(3), ok(4), ok(5)}}, NoChange, 0},
		{"dead learner removed eagerly", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3}, Learners: []uint64{4},
			Members: []MemberHealth{ok(1), ok(2), ok(3), dead(4, 30*time.Second)}}, RemoveLearner, 4},
		{"dead learner before threshold kept", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3}, Learners: []uint64{4},
			Members: []MemberHealth{ok(1), ok(2), ok(3), dead(4, 29*time.Second)}}, NoChange, 0},
		{"left learner removed at once", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3}, Learners: []uint64{4},
			Members: []MemberHealth{ok(1), ok(2), ok(3), {RaftID: 4, Gossip: StateLeft}}}, RemoveLearner, 4},
		{"dead learner removed before dead voter", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3}, Learners: []uint64{4, 5},
			Members: []MemberHealth{ok(1), ok(2), dead(3, time.Hour), dead(4, time.Hour), ok(5)}}, RemoveLearner, 4},
		{"max voters 7", PlanInput{LeaderID: 1, Voters: []uint64{1, 2, 3, 4, 5}, Learners: []uint64{6},
			Thresholds: Thresholds{MaxVoters: 7},
			Members:    []MemberHealth{ok(1), ok(2), ok(3), ok(4), ok(5), ok(6), ok(7)}}, PromoteLearner, 6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.in.Thresholds == (Thresholds{}) {
				c.in.Thresholds = th
			} else {
				mv := c.in.Thresholds.MaxVoters
				c.in.Thresholds = th
				c.in.Thresholds.MaxVoters = mv
			}
			if c.in.LastIndex == 0 {
				c.in.LastIndex = 1000
			}
			p := PlanVoters(c.in)
			require.Equal(t, c.want, p.Change, p.Reason)
			require.Equal(t, c.id, p.RaftID, p.Reason)
			require.NotEmpty(t, p.Reason)
		})
	}
}

// cluster is a tiny model of the leader applying plans one at a time.
type cluster struct {
	voters, learners, removed []uint64
	health                    map[uint64]*MemberHealth
	th                        *Thresholds // nil: th
}

func (c *cluster) input() PlanInput {
	in := PlanInput{LeaderID: 1, Voters: slices.Clone(c.voters), Learners: slices.Clone(c.learners), LastIndex: 1000,
		Removed: slices.Clone(c.removed), Thresholds: th}
	if c.th != nil {
		in.Thresholds = *c.th
	}
	for _, h := range c.health {
		in.Members = append(in.Members, *h)
	}
	slices.SortFunc(in.Members, func(a, b MemberHealth) int { return int(a.RaftID) - int(b.RaftID) })
	return in
}

// apply performs one planned change and checks it is a single step.
func (c *cluster) apply(t *testing.T, p Plan) {
	t.Helper()
	before := len(c.voters) + len(c.learners)
	switch p.Change {
	case AddLearner:
		c.learners = append(c.learners, p.RaftID)
		h := c.health[p.RaftID]
		h.RecentActive, h.Match = true, 1000
	case PromoteLearner:
		require.Contains(t, c.learners, p.RaftID)
		c.learners = slices.DeleteFunc(c.learners, func(id uint64) bool { return id == p.RaftID })
		c.voters = append(c.voters, p.RaftID)
	case RemoveVoter:
		require.Contains(t, c.voters, p.RaftID)
		c.voters = slices.DeleteFunc(c.voters, func(id uint64) bool { return id == p.RaftID })
		c.removed = append(c.removed, p.RaftID)
	case RemoveLearner:
		c.learners = slices.DeleteFunc(c.learners, func(id uint64) bool { return id == p.RaftID })
		c.removed = append(c.removed, p.RaftID)
	}
	after := len(c.voters) + len(c.learners)
	require.LessOrEqual(t, max(before-after, after-before), 1, "one change at a time")
	healthy := 0
	for _, id := range c.voters {
		if h := c.health[id]; h.Gossip == StateAlive && h.RecentActive {
			healthy++
		}
	}
	require.GreaterOrEqual(t, healthy, len(c.voters)/2+1, "healthy quorum kept after %v", p)
}

// run applies plans until none is advised, returning the plans.
func (c *cluster) run(t *testing.T) []Plan {
	var plans []Plan
	for i := 0; i < 50; i++ {
		p := PlanVoters(c.input())
		if p.Change == NoChange {
			return plans
		}
		c.apply(t, p)
		plans = append(plans, p)
	}
	t.Fatal("policy does not converge")
	return nil
}

// threeVoters is a steady cluster of voters 1, 2, 3 under thresholds th
// (nil: the package's th).
func threeVoters(t *testing.T, th *Thresholds) *cluster {
	c := &cluster{voters: []uint64{1, 2, 3}, health: map[uint64]*MemberHealth{}, th: th}
	for id := uint64(1); id <= 3; id++ {
		h := ok(id)
		c.health[id] = &h
	}
	require.Empty(t, c.run(t))
	return c
}

func TestPlanGrowthAndReplacementSequence(t *testing.T) {
	c := threeVoters(t, nil)

	// A 4th member: one warm learner, still 3 voters.
	h := newcomer(4, time.Hour)
	c.health[4] = &h
	c.run(t)
	require.Len(t, c.voters, 3)
	require.Equal(t, []uint64{4}, c.learners)

	// 5th: voters become 5, one change at a time.
	h5 := newcomer(5, time.Hour)
	c.health[5] = &h5
	plans := c.run(t)
	require.Equal(t, []ChangeKind{PromoteLearner, AddLearner, PromoteLearner}, kinds(plans))
	require.ElementsMatch(t, []uint64{1, 2, 3, 4, 5}, c.voters)
	require.Empty(t, c.learners)

	// Fleet grows to 10: only 2 warm learners.
	for id := uint64(6); id <= 10; id++ {
		h := newcomer(id, time.Hour)
		c.health[id] = &h
	}
	c.run(t)
	require.Len(t, c.voters, 5)
	require.Len(t, c.learners, 2)

	// A voter dies: kept until the threshold, then replaced by a learner and
	// a new standby is added.
	plans = c.voterDies(t, 3)
	require.Equal(t, []ChangeKind{RemoveVoter, PromoteLearner, AddLearner}, kinds(plans))
	require.NotContains(t, c.voters, uint64(3))
	require.Len(t, c.voters, 5)
	require.Len(t, c.learners, 2)
}

// voterDies fails voter id: nothing changes before DeadVoterAfter (th's
// minute); the plans that follow it are returned.
func (c *cluster) voterDies(t *testing.T, id uint64) []Plan {
	t.Helper()
	*c.health[id] = dead(id, 30*time.Second)
	require.Empty(t, c.run(t), "voter %d replaced before the threshold", id)
	c.health[id].UnhealthyFor = time.Minute
	return c.run(t)
}

func kinds(ps []Plan) []ChangeKind {
	var out []ChangeKind
	for _, p := range ps {
		out = append(out, p.Change)
	}
	return out
}

// TestPlanWithoutStandbys: MaxLearners negative keeps no warm standby — a
// fleet of 5 voters and the rest light members, as a leader's idle cost
// wants (each learner is one more follower to heartbeat) — yet the voters
// still grow to their target and a failed voter is still replaced, through
// one learner added for the purpose and promoted at once. Zero still means
// the default two.
func TestPlanWithoutStandbys(t *testing.T) {
	none := th
	none.MaxLearners = -1
	c := threeVoters(t, &none)

	// A 4th member stays light: 3 voters is the target for 4 members.
	h := newcomer(4, time.Hour)
	c.health[4] = &h
	require.Empty(t, c.run(t))

	// A 5th: the target is 5, reached through one learner at a time.
	h5 := newcomer(5, time.Hour)
	c.health[5] = &h5
	plans := c.run(t)
	require.Equal(t, []ChangeKind{AddLearner, PromoteLearner, AddLearner, PromoteLearner}, kinds(plans))
	require.ElementsMatch(t, []uint64{1, 2, 3, 4, 5}, c.voters)
	require.Empty(t, c.learners)

	// The fleet grows to 10: all light.
	for id := uint64(6); id <= 10; id++ {
		h := newcomer(id, time.Hour)
		c.health[id] = &h
	}
	require.Empty(t, c.run(t))
	require.Empty(t, c.learners)

	// A voter dies: kept until the threshold, then a learner is added,
	// replaces it and is promoted; no learner is left.
	plans = c.voterDies(t, 3)
	require.Equal(t, []ChangeKind{AddLearner, RemoveVoter, PromoteLearner}, kinds(plans))
	require.NotContains(t, c.voters, uint64(3))
	require.Len(t, c.voters, 5)
	require.Empty(t, c.learners)

	// A learner beyond what is needed is removed.
	in := c.input()
	in.Learners = []uint64{7}
	require.Equal(t, RemoveLearner, PlanVoters(in).Change)

	// Zero is the default: two standbys.
	zero := th
	zero.MaxLearners = 0
	require.Equal(t, 2, zero.withDefaults().MaxLearners)
	in.Thresholds, in.Learners = zero, nil
	require.Equal(t, AddLearner, PlanVoters(in).Change)
}
