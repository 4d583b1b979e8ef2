package membership

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func mem(id uint64, cluster string, state State, hasData bool) Member {
	return Member{Name: "n" + string(rune('a'+id)), Meta: Meta{RaftID: id, RaftAddr: "x:1", ClusterID: cluster, HasData: hasData}, State: state}
}

func names(ms []Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

// TestPlanFormation covers each condition of the advice. The node asks the
// founders directly before it bootstraps; this is only when it starts to.
func TestPlanFormation(t *testing.T) {
	founders := []string{"nc", "nb", "nd"} // candidate "nb" (first in sort order)
	self := func(id uint64) Meta { return Meta{RaftID: id, RaftAddr: "x:1", ClusterID: "c"} }
	alive := func(id ...uint64) []Member {
		var ms []Member
		for _, i := range id {
			ms = append(ms, mem(i, "c", StateAlive, false))
		}
		return ms
	}
	withFormation := func(m Member, f string) Member { m.Meta.Formation = f; return m }
	cases := []struct {
		name     string
		selfName string
		self     Meta
		founders []string
		ms       []Member
		ready    bool
		cand     bool
		wait     string
	}{
		{"all founders seen: candidate is ready", "nb", self(1), founders, alive(1, 2, 3), true, true, ""},
		{"self need not be listed", "nb", self(1), founders, alive(2, 3), true, true, ""},
		{"not the candidate", "nc", self(2), founders, alive(1, 2, 3), false, false, "not the founder"},
		{"not a founder", "nz", self(25), founders, alive(1, 2, 3, 25), false, false, "not the founder"},
		{"a founder missing", "nb", self(1), founders, alive(1, 2), false, true, "founder nd not seen"},
		{"a founder failed", "nb", self(1), founders, append(alive(1, 2), mem(3, "c", StateFailed, false)), false, true, "founder nd not seen"},
		{"more members than founders", "nb", self(1), founders, alive(1, 2, 3, 4, 5, 6), true, true, ""},
		{"self has data", "nb", Meta{RaftID: 1, RaftAddr: "x:1", ClusterID: "c", HasData: true}, founders, alive(2, 3), false, true, "this member has raft data"},
		{"a non-founder has data", "nb", self(1), founders, append(alive(1, 2, 3), mem(5, "c", StateAlive, true)), false, true, "has raft data"},
		{"a failed member has data", "nb", self(1), founders, append(alive(1, 2, 3), mem(5, "c", StateFailed, true)), false, true, "has raft data"},
		{"a left member has data", "nb", self(1), founders, append(alive(1, 2, 3), mem(5, "c", StateLeft, true)), false, true, "has raft data"},
		{"another formation seen", "nb", self(1), founders, append(alive(1, 2, 3), withFormation(mem(5, "c", StateAlive, false), "f2")), false, true, "formation f2"},
		{"own formation seen (a founder adopted it)", "nb", Meta{RaftID: 1, RaftAddr: "x:1", ClusterID: "c", Formation: "f1"}, founders,
			append(alive(1, 3), withFormation(mem(2, "c", StateAlive, false), "f1")), true, true, ""},
		{"other cluster ignored", "nb", self(1), founders, append(alive(1, 2, 3), mem(5, "d", StateAlive, true)), true, true, ""},
		{"a founder of another cluster does not count", "nb", self(1), founders, append(alive(1, 2), mem(3, "d", StateAlive, false)), false, true, "founder nd not seen"},
		{"founders share a raft id", "nb", self(1), founders, append(alive(1, 2), Member{Name: "nd", Meta: Meta{RaftID: 2, RaftAddr: "y:1", ClusterID: "c"}}), false, true, "share raft id"},
		{"single founder (development mode)", "nh", self(7), []string{"nh"}, nil, true, true, ""},
		{"single founder with data", "nh", Meta{RaftID: 7, RaftAddr: "x:1", ClusterID: "c", HasData: true}, []string{"nh"}, nil, false, true, "raft data"},
		{"no founders", "nb", self(1), nil, alive(1, 2, 3), false, false, "not the founder"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := PlanFormation(c.selfName, c.self, c.founders, c.ms)
			require.Equal(t, c.cand, p.Candidate, p.Wait)
			require.Equal(t, c.ready, p.Ready, p.Wait)
			if c.ready {
				require.Empty(t, p.Wait)
				want := append([]string(nil), c.founders...)
				require.ElementsMatch(t, want, names(p.Founders))
				require.True(t, sortedStrings(names(p.Founders)))
				require.Equal(t, c.self, p.Founders[0].Meta, "self is the first founder, with its own metadata")
			} else {
				require.Contains(t, p.Wait, c.wait)
				require.Nil(t, p.Founders)
			}
		})
	}
}

func sortedStrings(s []string) bool {
	for i := 1; i < len(s); i++ {
		if s[i-1] > s[i] {
			return false
		}
	}
	return true
}

// TestPlanFormationOneCandidate (S1): whatever each member sees — here
// random partial views of a fleet larger than the founding set, as islands
// of a partition would have — at most one member is ever advised to start
// forming, and it is the same member in every view: the founder whose name
// sorts first. A count of visible members ("BootstrapExpect seen") cannot
// give this: two islands of three both see three.
func TestPlanFormationOneCandidate(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for round := 0; round < 200; round++ {
		n := 2 + rng.IntN(9)
		k := 1 + rng.IntN(n)
		var fleet []Member
		for i := 0; i < n; i++ {
			fleet = append(fleet, Member{Name: fmt.Sprintf("pod-%d", i), Meta: Meta{RaftID: rng.Uint64() | 1, RaftAddr: "x:1", ClusterID: "c"}})
		}
		founders := names(fleet[:k])
		rng.Shuffle(len(founders), func(i, j int) { founders[i], founders[j] = founders[j], founders[i] })
		candidates := map[string]bool{}
		for _, self := range fleet {
			var view []Member // an island: a random subset
			for _, m := range fleet {
				if m.Name == self.Name || rng.IntN(2) == 0 {
					view = append(view, m)
				}
			}
			if p := PlanFormation(self.Name, self.Meta, founders, view); p.Candidate {
				candidates[self.Name] = true
			}
		}
		require.LessOrEqual(t, len(candidates), 1, "founders %v: candidates %v", founders, candidates)
		if len(candidates) == 1 {
			require.True(t, candidates["pod-0"], "the candidate is the first founder name: %v", candidates)
		}
	}
}
