package membership

import "slices"

// ShouldBootstrap decides whether self should bootstrap a new raft cluster
// and, if so, with which voters. It is a pure function of its inputs; call it
// with Members() once the view has been unchanged for a settle period (a few
// probe intervals), and only while this node has no raft state.
//
// It returns true, with the voters sorted by RaftID, only when all hold:
//   - expect >= 1 and self is usable (non-zero RaftID, a ClusterID) and
//     self.HasData is false;
//   - no member of self's cluster, in any state, has HasData (a cluster
//     already exists: join it instead; a restart with data never
//     re-bootstraps);
//   - no two members of self's cluster share a RaftID;
//   - at least expect Alive members of self's cluster are visible (self
//     counts, listed or not);
//   - self has the lowest RaftID among all of them.
//
// The voters are the expect Alive members with the lowest RaftIDs. Members
// of other clusters are ignored. Every member that sees the same view
// computes the same answer, so exactly one bootstraps; the others wait to be
// contacted by its leader. expect == 1 is the single-node development mode.
func ShouldBootstrap(self Meta, members []Member, expect int) (bootstrap bool, voters []Member) {
	if expect < 1 || self.RaftID == 0 || self.ClusterID == "" || self.HasData {
		return false, nil
	}
	seen := make(map[uint64]string)
	alive := []Member{{Name: "", Meta: self, State: StateAlive}}
	selfListed := false
	for _, mem := range members {
		if mem.Meta.ClusterID != self.ClusterID {
			continue
		}
		if mem.Meta.HasData {
			return false, nil
		}
		if mem.Meta.RaftID == 0 {
			return false, nil
		}
		if name, dup := seen[mem.Meta.RaftID]; dup && name != mem.Name {
			return false, nil
		}
		seen[mem.Meta.RaftID] = mem.Name
		if mem.Meta.RaftID == self.RaftID {
			if !selfListed {
				alive[0] = mem // prefer the listed copy (name, address)
				selfListed = true
			}
			continue
		}
		if mem.State == StateAlive {
			alive = append(alive, mem)
		}
	}
	if len(alive) < expect {
		return false, nil
	}
	slices.SortFunc(alive, func(a, b Member) int {
		switch {
		case a.Meta.RaftID < b.Meta.RaftID:
			return -1
		case a.Meta.RaftID > b.Meta.RaftID:
			return 1
		}
		return 0
	})
	if alive[0].Meta.RaftID != self.RaftID {
		return false, nil
	}
	return true, slices.Clone(alive[:expect])
}
