package membership

import (
	"cmp"
	"fmt"
	"slices"
)

// FormationPlan is PlanFormation's advice to one member.
type FormationPlan struct {
	// Candidate: this member is the founder that starts the cluster, the one
	// whose name sorts first among the founders. No other member ever does.
	Candidate bool
	// Ready: the candidate sees every founder alive, with usable metadata and
	// no raft data, and no member of its cluster with raft data or another
	// formation: it may ask the founders to adopt its formation id.
	Ready bool
	// Founders, when Ready: every founder as seen now (self included), sorted
	// by name. The node still asks each one directly: this view may be stale.
	Founders []Member
	// Wait, when not Ready: why, for the logs.
	Wait string
}

// PlanFormation advises whether self (gossip name selfName, metadata self)
// should start forming the cluster now. founders are the gossip names of
// the founding members as configured (the same list on every member);
// members is Members(). It is a pure function.
//
// Gossip only advises here: a founder's answer to the node's direct
// "adopt this formation" call is what counts
// (node/internal/fleet/formation.go explains why a stale or partial view
// can delay forming but never make two clusters). The advice is Ready only when all of these hold:
//   - selfName is the first of founders in sort order (the candidate), and
//     self has no raft data;
//   - every other founder is listed Alive with a distinct RaftID;
//   - no member of self's cluster, in any state, has raft data (a cluster
//     exists: this member joins it instead), and none belongs to a formation
//     other than self's.
//
// A single founder (the development mode) is Ready at once.
func PlanFormation(selfName string, self Meta, founders []string, members []Member) FormationPlan {
	names := slices.Clone(founders)
	slices.Sort(names)
	if len(names) == 0 || names[0] != selfName {
		return FormationPlan{Wait: "not the founder that forms the cluster"}
	}
	p := FormationPlan{Candidate: true}
	if self.HasData {
		p.Wait = "this member has raft data"
		return p
	}
	byName := map[string]Member{}
	for _, m := range members {
		if m.Meta.ClusterID != self.ClusterID || m.Name == selfName {
			continue
		}
		if m.Meta.HasData {
			p.Wait = fmt.Sprintf("member %s has raft data: a cluster exists", m.Name)
			return p
		}
		if m.Meta.Formation != "" && m.Meta.Formation != self.Formation {
			p.Wait = fmt.Sprintf("member %s belongs to formation %s", m.Name, m.Meta.Formation)
			return p
		}
		byName[m.Name] = m
	}
	out := []Member{{Name: selfName, Meta: self, State: StateAlive}}
	ids := map[uint64]string{self.RaftID: selfName}
	for _, name := range names[1:] {
		m, ok := byName[name]
		if !ok || m.State != StateAlive {
			p.Wait = fmt.Sprintf("founder %s not seen alive", name)
			return p
		}
		if other, dup := ids[m.Meta.RaftID]; dup {
			p.Wait = fmt.Sprintf("founders %s and %s share raft id %016x", other, name, m.Meta.RaftID)
			return p
		}
		ids[m.Meta.RaftID] = name
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int { return cmp.Compare(a.Name, b.Name) })
	p.Ready, p.Founders = true, out
	return p
}
