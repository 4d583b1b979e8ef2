package chaos

import (
	"context"
	"sync"
	"time"
)

// FencedStore is the resource the locks protect. Each critical section
// writes with its fencing token; the store rejects a token lower than the
// highest it has accepted for the name (S2 as used by a client). It counts:
//
//   - AcceptedOverlaps: accepted writes of two critical sections interleave
//     (A, B, A): both were let through while the other was active. Must be 0.
//   - LiveOverlaps: a section entered while another section of the name was
//     still open and its holder still believed it held the lock (its handle's
//     Context not cancelled, its node not paused): the lock-set check
//     without fencing, S1 and S5 together.
//   - Stale: writes rejected for a low token (a holder that lost its lock
//     and did not notice in time; fencing doing its job).
//
// The catalogue's sections (Section.Kind):
//
//   - exclusive (a mutex, a read-write lock's writer, an election's leader
//     with its term, each name of a multi-name lock): as above. A writer is
//     fenced against stale readers too: its token must be at least every
//     token accepted on the name, a reader's or a writer's.
//   - shared (a reader): accepted if its token is at least the highest
//     writer's accepted on the name (a reader granted before that writer is
//     stale); readers do not fence each other. An accepted overlap is an
//     A, B, A interleaving of accepted writes where A or B is a writer. A
//     live overlap: a reader entering beside a live writer, a writer beside
//     any live section.
//   - permits (a semaphore acquisition of Permits of Limit): the resource
//     admits at most Limit permits at once, newest tokens first: a section
//     whose first write would exceed it evicts admitted sections of lower
//     tokens (their later writes are stale), or is stale itself if its token
//     is the lowest. This is conservative (a live holder with an old token
//     may be evicted by a newer grant that replaced an expired one), so the
//     count of accepted permits can never exceed Limit; the semaphore's
//     checks are the live overlaps (live permits above Limit) and porcupine.
type FencedStore struct {
	// AcceptStale is a planted bug: accept every token.
	AcceptStale bool
	// OnLive, if set, is told about every live overlap (prev was open and
	// live when next entered). Called under the store's lock: must not
	// block. Diagnostics only; the count is kept either way.
	OnLive func(prev, next *Section)

	mu                                            sync.Mutex
	highest                                       map[string]uint64
	highestWriter                                 map[string]uint64   // shared sections: the highest exclusive token accepted
	last                                          map[string]*Section // section of the last accepted write
	open                                          map[string]map[*Section]bool
	admitted                                      map[string]map[*Section]bool // permit sections admitted, per name
	Writes, Stale, AcceptedOverlaps, LiveOverlaps int64
	Examples                                      []string
}

// Section kinds (Section.Kind).
const (
	SectionExclusive = iota
	SectionShared
	SectionPermits
)

// Section is one critical section.
type Section struct {
	Name  string
	Token uint64
	Owner string
	Live  func() bool // does the holder still believe it holds?
	// Kind: SectionExclusive (the zero value), SectionShared, or
	// SectionPermits with Permits of Limit.
	Kind           int
	Permits, Limit int
	// Diagnostics (optional): the holder's node (raft id), its hold's
	// Context and when the section was entered.
	Node     uint64
	Ctx      context.Context
	At       time.Time
	exited   chan struct{}
	accepted int
	evicted  bool // a permit section pushed out by newer tokens
}

// NewFencedStore returns an empty store.
func NewFencedStore() *FencedStore {
	return &FencedStore{highest: map[string]uint64{}, highestWriter: map[string]uint64{}, last: map[string]*Section{},
		open: map[string]map[*Section]bool{}, admitted: map[string]map[*Section]bool{}}
}

// conflicts says whether an open section o and a section entering beside it
// may not both be live.
func conflicts(o, sec *Section) bool {
	switch {
	case sec.Kind == SectionPermits || o.Kind == SectionPermits:
		return false // counted by permits
	case sec.Kind == SectionShared && o.Kind == SectionShared:
		return false
	}
	return true
}

// Enter opens a section.
func (s *FencedStore) Enter(name, owner string, token uint64, live func() bool) *Section {
	return s.EnterSection(&Section{Name: name, Token: token, Owner: owner, Live: live})
}

// EnterSection opens sec (Name, Token, Owner, Live and the optional
// diagnostic fields set by the caller).
func (s *FencedStore) EnterSection(sec *Section) *Section {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sec.At.IsZero() {
		sec.At = time.Now()
	}
	sec.exited = make(chan struct{})
	name := sec.Name
	livePermits := sec.Permits
	for o := range s.open[name] {
		if o.Live == nil || o.Live() {
			if sec.Kind == SectionPermits {
				livePermits += o.Permits
				continue
			}
			if !conflicts(o, sec) {
				continue
			}
			s.LiveOverlaps++
			s.example("live overlap on %s: %s (token %d) entered while %s (token %d) still held it", name, sec.Owner, sec.Token, o.Owner, o.Token)
			if s.OnLive != nil {
				s.OnLive(o, sec)
			}
		}
	}
	if sec.Kind == SectionPermits && livePermits > sec.Limit {
		s.LiveOverlaps++
		s.example("live overlap on %s: %s (token %d, %d permits) entered with %d live permits of %d", name, sec.Owner,
			sec.Token, sec.Permits, livePermits, sec.Limit)
	}
	if s.open[name] == nil {
		s.open[name] = map[*Section]bool{}
	}
	s.open[name][sec] = true
	return sec
}

// Write is one write of the section; it reports whether it was accepted.
func (s *FencedStore) Write(sec *Section) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Writes++
	switch sec.Kind {
	case SectionPermits:
		return s.writePermits(sec)
	case SectionShared:
		if sec.Token < s.highestWriter[sec.Name] && !s.AcceptStale {
			s.Stale++
			return false
		}
	default:
		if sec.Token < s.highest[sec.Name] && !s.AcceptStale {
			s.Stale++
			return false
		}
		s.highestWriter[sec.Name] = max(s.highestWriter[sec.Name], sec.Token)
	}
	s.highest[sec.Name] = max(s.highest[sec.Name], sec.Token)
	if l := s.last[sec.Name]; l != nil && l != sec && sec.accepted > 0 && conflicts(l, sec) {
		s.AcceptedOverlaps++
		s.example("accepted overlap on %s: %s (token %d) wrote again after %s (token %d) wrote", sec.Name, sec.Owner, sec.Token, l.Owner, l.Token)
	}
	s.last[sec.Name] = sec
	sec.accepted++
	return true
}

// writePermits admits a permit section's write (under the lock): at most
// Limit permits admitted at once, newest tokens first.
func (s *FencedStore) writePermits(sec *Section) bool {
	adm := s.admitted[sec.Name]
	if adm == nil {
		adm = map[*Section]bool{}
		s.admitted[sec.Name] = adm
	}
	if sec.evicted && !s.AcceptStale {
		s.Stale++
		return false
	}
	if adm[sec] {
		sec.accepted++
		return true
	}
	used := sec.Permits
	for o := range adm {
		used += o.Permits
	}
	for used > sec.Limit && !s.AcceptStale {
		var oldest *Section
		for o := range adm {
			if oldest == nil || o.Token < oldest.Token {
				oldest = o
			}
		}
		if oldest == nil || oldest.Token >= sec.Token {
			s.Stale++
			sec.evicted = true
			return false
		}
		delete(adm, oldest)
		oldest.evicted = true
		used -= oldest.Permits
	}
	adm[sec] = true
	if s.AcceptStale && used > sec.Limit {
		s.AcceptedOverlaps++
		s.example("accepted overlap on %s: %d permits admitted of %d", sec.Name, used, sec.Limit)
	}
	sec.accepted++
	return true
}

// Exit closes a section.
func (s *FencedStore) Exit(sec *Section) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.open[sec.Name], sec)
	delete(s.admitted[sec.Name], sec)
	if sec.exited != nil {
		close(sec.exited)
		sec.exited = nil
	}
}

func (s *FencedStore) example(format string, a ...any) {
	if len(s.Examples) < 5 {
		s.Examples = append(s.Examples, sprintf(format, a...))
	}
}

// Counts returns the counters under the lock.
func (s *FencedStore) Counts() (writes, stale, accepted, live int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Writes, s.Stale, s.AcceptedOverlaps, s.LiveOverlaps
}
