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
type FencedStore struct {
	// AcceptStale is a planted bug: accept every token.
	AcceptStale bool
	// OnLive, if set, is told about every live overlap (prev was open and
	// live when next entered). Called under the store's lock: must not
	// block. Diagnostics only; the count is kept either way.
	OnLive func(prev, next *Section)

	mu                                            sync.Mutex
	highest                                       map[string]uint64
	last                                          map[string]*Section // section of the last accepted write
	open                                          map[string]map[*Section]bool
	Writes, Stale, AcceptedOverlaps, LiveOverlaps int64
	Examples                                      []string
}

// Section is one critical section.
type Section struct {
	Name  string
	Token uint64
	Owner string
	Live  func() bool // does the holder still believe it holds?
	// Diagnostics (optional): the holder's node (raft id), its hold's
	// Context and when the section was entered.
	Node     uint64
	Ctx      context.Context
	At       time.Time
	exited   chan struct{}
	accepted int
}

// NewFencedStore returns an empty store.
func NewFencedStore() *FencedStore {
	return &FencedStore{highest: map[string]uint64{}, last: map[string]*Section{}, open: map[string]map[*Section]bool{}}
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
	for o := range s.open[name] {
		if o.Live == nil || o.Live() {
			s.LiveOverlaps++
			s.example("live overlap on %s: %s (token %d) entered while %s (token %d) still held it", name, sec.Owner, sec.Token, o.Owner, o.Token)
			if s.OnLive != nil {
				s.OnLive(o, sec)
			}
		}
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
	if sec.Token < s.highest[sec.Name] && !s.AcceptStale {
		s.Stale++
		return false
	}
	s.highest[sec.Name] = max(s.highest[sec.Name], sec.Token)
	if l := s.last[sec.Name]; l != nil && l != sec && sec.accepted > 0 {
		s.AcceptedOverlaps++
		s.example("accepted overlap on %s: %s (token %d) wrote again after %s (token %d) wrote", sec.Name, sec.Owner, sec.Token, l.Owner, l.Token)
	}
	s.last[sec.Name] = sec
	sec.accepted++
	return true
}

// Exit closes a section.
func (s *FencedStore) Exit(sec *Section) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.open[sec.Name], sec)
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
