package forward

// Every raft member keeps the recent changes of each election (history),
// also after the election leaves the lock table, and knows which indexes
// its records cover (cover: every change after the index it started or
// restored a snapshot at, except what it trimmed or evicted). As leader it
// answers a light member's catch-up from them (ServeObserve) and pushes
// each new change to the members that subscribed, with the index after
// which nothing changed before it.

// HistoryLen is how many recent changes of each election every raft member
// keeps, for light members that missed a push; MaxHistories is how many
// elections it keeps them for (the oldest is evicted).
const (
	HistoryLen   = 64
	MaxHistories = 4096
)

// history is a raft member's record of an election's recent changes,
// oldest first; trimmed is the index of the last change it dropped (0:
// none).
type history struct {
	changes []Change
	trimmed uint64
}

// cover is what a raft member's election records cover: every change
// applied after from (where it started, or the snapshot it restored),
// except those of elections evicted, the last of which is at or before
// evicted.
type cover struct{ from, evicted uint64 }

// covers reports whether this node knows every change of the election h
// (nil: none recorded) after index after.
func (s *State) covers(h *history, after uint64) bool {
	if after < s.cover.from || after < s.cover.evicted {
		return false
	}
	return h == nil || after >= h.trimmed
}

// lastChangeBefore is an index after which the election h (nil: none
// recorded) did not change up to now: its last recorded change, or the
// start of what the records cover.
func (s *State) lastChangeBefore(h *history) uint64 {
	if h != nil && len(h.changes) > 0 {
		return h.changes[len(h.changes)-1].Index
	}
	return max(s.cover.from, s.cover.evicted)
}

// OnLeaderChange records an election change this raft member applied and,
// as leader, pushes it to the light members that watch the election.
func (s *State) OnLeaderChange(c Change) {
	h := s.elections[c.Name]
	prev := s.lastChangeBefore(h)
	if h == nil {
		if len(s.elections) >= MaxHistories {
			s.evict()
		}
		h = &history{}
		s.elections[c.Name] = h
	}
	if len(h.changes) == HistoryLen {
		h.trimmed = h.changes[0].Index
		copy(h.changes, h.changes[1:])
		h.changes = h.changes[:HistoryLen-1]
	}
	h.changes = append(h.changes, c)
	if s.leading {
		s.pushLeaderChange(c, prev)
	}
}

// evict drops the record of the election whose last change is the oldest;
// a member behind it is told it lagged.
func (s *State) evict() {
	var oldest string
	var at uint64
	for name, h := range s.elections {
		last := h.changes[len(h.changes)-1].Index
		if oldest == "" || last < at || (last == at && name < oldest) {
			oldest, at = name, last
		}
	}
	delete(s.elections, oldest)
	s.cover.evicted = max(s.cover.evicted, at)
}

// Restored: the lock table was replaced by a snapshot at applied; the
// changes it covers were never applied here, so the records start again
// from it.
func (s *State) Restored(applied uint64) {
	clear(s.elections)
	s.cover = cover{from: applied}
}
