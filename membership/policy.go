package membership

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// ChangeKind is the kind of raft configuration change a Plan advises.
type ChangeKind uint8

const (
	NoChange       ChangeKind = iota // nothing to do
	AddLearner                       // ConfChangeAddLearnerNode
	PromoteLearner                   // ConfChangeAddNode on an existing learner
	RemoveVoter                      // ConfChangeRemoveNode on a voter
	RemoveLearner                    // ConfChangeRemoveNode on a learner
)

func (k ChangeKind) String() string {
	return [...]string{"none", "add-learner", "promote-learner", "remove-voter", "remove-learner"}[k]
}

// Thresholds tune PlanVoters. Zero fields take the defaults in
// DefaultThresholds.
type Thresholds struct {
	// StabilizeFor: a member must have been healthy this long, without
	// interruption, before it is added as a learner or promoted to voter.
	// Keeps a flapping member out.
	StabilizeFor time.Duration
	// DeadVoterAfter: a voter must have been failed (see PlanVoters) this long
	// before it may be removed. Long, because a false positive shrinks the
	// quorum.
	DeadVoterAfter time.Duration
	// DeadLearnerAfter: the same for learners, which can go eagerly.
	DeadLearnerAfter time.Duration
	// MaxLag: a member whose Match trails the leader's last index by more than
	// this is not caught up (not healthy for promotion, not counted healthy).
	MaxLag uint64
	// MaxLearners: warm standbys kept as raft learners (0: the default, 2).
	// The rest of the fleet stays out of the raft configuration (light
	// members). Negative: none. A learner is then added only while the
	// voters are below their target or one of them has failed, and promoted
	// in its place once ready: replacing a failed voter then waits for the
	// new learner to catch up, where a standby would already have.
	MaxLearners int
	// MaxVoters: 3, 5 or 7; see targetVoters.
	MaxVoters int
}

// DefaultThresholds: stabilize 10 s, dead voter 5 min, dead learner 30 s,
// lag 250 entries, 2 learners, at most 5 voters.
func DefaultThresholds() Thresholds {
	return Thresholds{
		StabilizeFor:     10 * time.Second,
		DeadVoterAfter:   5 * time.Minute,
		DeadLearnerAfter: 30 * time.Second,
		MaxLag:           250,
		MaxLearners:      2,
		MaxVoters:        5,
	}
}

func (t Thresholds) withDefaults() Thresholds {
	d := DefaultThresholds()
	if t.StabilizeFor <= 0 {
		t.StabilizeFor = d.StabilizeFor
	}
	if t.DeadVoterAfter <= 0 {
		t.DeadVoterAfter = d.DeadVoterAfter
	}
	if t.DeadLearnerAfter <= 0 {
		t.DeadLearnerAfter = d.DeadLearnerAfter
	}
	if t.MaxLag == 0 {
		t.MaxLag = d.MaxLag
	}
	if t.MaxLearners == 0 {
		t.MaxLearners = d.MaxLearners
	}
	if t.MaxVoters <= 0 {
		t.MaxVoters = d.MaxVoters
	}
	return t
}

// targetVoters is the voter count to aim for with the given number of live
// members: 3, then 5 once there are 5 or more members, then 7 once there are
// 7 or more — but never above maxVoters (0 means 5; it is rounded down to an
// odd number in [3, 7]). Always odd. With fewer than 3 members the target is
// still 3; it is reached as members arrive.
func targetVoters(members, maxVoters int) int {
	if maxVoters <= 0 {
		maxVoters = 5
	}
	maxVoters = min(max(maxVoters, 3), 7)
	if maxVoters%2 == 0 {
		maxVoters--
	}
	t := 3
	for _, step := range []int{5, 7} {
		if members >= step && maxVoters >= step {
			t = step
		}
	}
	return t
}

// MemberHealth is the leader's view of one member. The caller (the leader's
// node loop) tracks HealthyFor/UnhealthyFor with the same definition of
// healthy that PlanVoters uses: for a member in the raft configuration,
// Gossip == StateAlive && RecentActive && lastIndex-Match <= MaxLag; for any
// other member, Gossip == StateAlive.
type MemberHealth struct {
	RaftID uint64
	// Gossip is the member's state in the leader's Members(); members that
	// gossip no longer lists should be passed as StateFailed with the time
	// since they vanished.
	Gossip State
	// HasData from the member's Meta: a non-member with raft state is a
	// removed or foreign replica and is never added.
	HasData bool
	// RecentActive and Match come from the leader's raft Progress; zero for
	// members outside the configuration.
	RecentActive bool
	Match        uint64
	// HealthyFor: how long it has been continuously healthy (0 if not now).
	HealthyFor time.Duration
	// UnhealthyFor: how long it has been continuously unhealthy (0 if healthy).
	UnhealthyFor time.Duration
}

// PlanInput is everything PlanVoters looks at.
type PlanInput struct {
	LeaderID  uint64   // the caller: always healthy, never removed
	Voters    []uint64 // current raft configuration (not joint)
	Learners  []uint64
	LastIndex uint64 // leader's last log index
	// Pending: a configuration change is proposed but not yet applied. No
	// plan is made until it is (raft would replace a second one by an empty
	// entry).
	Pending bool
	// Members: every member the leader knows of, in or out of the
	// configuration. A configuration member missing here is never touched.
	Members []MemberHealth
	// Removed: raft IDs ever removed from the configuration; never re-added.
	Removed    []uint64
	Thresholds Thresholds
}

// Plan is one advised configuration change. The leader proposes it, waits
// for it to be applied, and asks again.
type Plan struct {
	Change ChangeKind
	RaftID uint64
	Reason string
}

// PlanVoters advises at most one configuration change, by priority:
//
//  1. RemoveLearner: a learner Left, or failed for DeadLearnerAfter, or
//     beyond MaxLearners (with none, beyond the one a voter set below its
//     target or with a failed voter needs).
//  2. RemoveVoter: a voter not RecentActive, not Alive in gossip, for
//     DeadVoterAfter — both signals must agree — and only when a ready
//     learner can take its place or voters exceed the target, and only if the
//     healthy voters still form a quorum of the smaller configuration.
//  3. PromoteLearner: fewer voters than targetVoters and a learner healthy
//     and caught up for StabilizeFor (longest-stable first, then lowest ID).
//  4. AddLearner: fewer learners than MaxLearners (with none: no learner,
//     and voters below their target or one failed) and a non-member Alive
//     for StabilizeFor, without raft data, never removed before.
//
// Healthy voters are never removed, and the leader never is. It is a pure
// function: no clock, no I/O.
func PlanVoters(in PlanInput) Plan {
	t := in.Thresholds.withDefaults()
	if in.Pending {
		return Plan{Reason: "a configuration change is pending"}
	}
	health := make(map[uint64]MemberHealth, len(in.Members))
	live := 0
	for _, h := range in.Members {
		health[h.RaftID] = h
		if h.Gossip == StateAlive {
			live++
		}
	}
	inConfig := make(map[uint64]bool)
	for _, id := range in.Voters {
		inConfig[id] = true
	}
	for _, id := range in.Learners {
		inConfig[id] = true
	}
	healthy := func(id uint64) bool {
		if id == in.LeaderID {
			return true
		}
		h, ok := health[id]
		if !ok || h.Gossip != StateAlive {
			return false
		}
		if !inConfig[id] {
			return true
		}
		return h.RecentActive && in.LastIndex-min(h.Match, in.LastIndex) <= t.MaxLag
	}
	ready := func(id uint64) bool { return healthy(id) && health[id].HealthyFor >= t.StabilizeFor }
	byStability := func(ids []uint64) []uint64 {
		ids = slices.Clone(ids)
		longestFirst(ids, health, func(h MemberHealth) time.Duration { return h.HealthyFor })
		return ids
	}
	target := targetVoters(live, t.MaxVoters)
	var failed []uint64
	for _, id := range in.Voters {
		h, ok := health[id]
		if id == in.LeaderID || !ok {
			continue
		}
		if h.Gossip != StateAlive && !h.RecentActive && h.UnhealthyFor >= t.DeadVoterAfter {
			failed = append(failed, id)
		}
	}
	longestFirst(failed, health, func(h MemberHealth) time.Duration { return h.UnhealthyFor })
	// Learners allowed: the standbys, or with none the one that grows the
	// voters to their target or replaces a failed one.
	allowed := max(t.MaxLearners, 0)
	if allowed == 0 && (len(in.Voters) < target || len(failed) > 0) {
		allowed = 1
	}

	// 1. Learners go eagerly.
	for _, id := range slices.Sorted(slices.Values(in.Learners)) {
		h, ok := health[id]
		if !ok {
			continue
		}
		if h.Gossip == StateLeft {
			return Plan{RemoveLearner, id, fmt.Sprintf("learner %016x left gossip", id)}
		}
		if !healthy(id) && h.Gossip != StateAlive && h.UnhealthyFor >= t.DeadLearnerAfter {
			return Plan{RemoveLearner, id, fmt.Sprintf("learner %016x failed for %v (>= %v)", id, h.UnhealthyFor, t.DeadLearnerAfter)}
		}
	}
	if len(in.Learners) > allowed {
		ids := byStability(in.Learners)
		id := ids[len(ids)-1]
		return Plan{RemoveLearner, id, fmt.Sprintf("%d learners, at most %d: removing the least stable", len(in.Learners), allowed)}
	}

	// 2. Replace a failed voter.
	var readyLearners []uint64
	for _, id := range byStability(in.Learners) {
		if ready(id) {
			readyLearners = append(readyLearners, id)
		}
	}
	healthyVoters := 0
	for _, id := range in.Voters {
		if healthy(id) {
			healthyVoters++
		}
	}
	if len(failed) > 0 {
		id := failed[0]
		after := len(in.Voters) - 1
		switch {
		case healthyVoters < after/2+1:
			// Removing would leave fewer healthy voters than the new quorum.
		case len(readyLearners) > 0:
			return Plan{RemoveVoter, id, fmt.Sprintf("voter %016x failed for %v (>= %v); learner %016x is ready to replace it",
				id, health[id].UnhealthyFor, t.DeadVoterAfter, readyLearners[0])}
		case len(in.Voters) > target:
			return Plan{RemoveVoter, id, fmt.Sprintf("voter %016x failed for %v (>= %v); %d voters > target %d",
				id, health[id].UnhealthyFor, t.DeadVoterAfter, len(in.Voters), target)}
		}
	}

	// 3. Grow the voters.
	if len(in.Voters) < target && len(readyLearners) > 0 {
		id := readyLearners[0]
		return Plan{PromoteLearner, id, fmt.Sprintf("%d voters < target %d; learner %016x healthy and caught up for %v",
			len(in.Voters), target, id, health[id].HealthyFor)}
	}

	// 4. Keep warm standbys.
	if len(in.Learners) < allowed {
		removed := make(map[uint64]bool, len(in.Removed))
		for _, id := range in.Removed {
			removed[id] = true
		}
		var cands []uint64
		for _, h := range in.Members {
			if h.RaftID != 0 && !inConfig[h.RaftID] && !removed[h.RaftID] && !h.HasData && ready(h.RaftID) {
				cands = append(cands, h.RaftID)
			}
		}
		if len(cands) > 0 {
			id := byStability(cands)[0]
			return Plan{AddLearner, id, fmt.Sprintf("%d learners < %d; member %016x alive for %v",
				len(in.Learners), allowed, id, health[id].HealthyFor)}
		}
	}
	if len(failed) > 0 {
		return Plan{Reason: fmt.Sprintf("voter %016x failed but cannot be removed yet (healthy voters %d of %d, target %d, ready learners %d)",
			failed[0], healthyVoters, len(in.Voters), target, len(readyLearners))}
	}
	return Plan{Reason: "configuration matches policy"}
}

// longestFirst sorts ids by the duration d reads from their health, longest
// first, then by lowest id.
func longestFirst(ids []uint64, health map[uint64]MemberHealth, d func(MemberHealth) time.Duration) {
	slices.SortFunc(ids, func(a, b uint64) int {
		if c := cmp.Compare(d(health[b]), d(health[a])); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
}
