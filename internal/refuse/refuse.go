// Package refuse logs refused network input without letting the input decide
// how much is logged.
//
// A node refuses what a peer or a stranger sends it (a connection without a
// valid certificate, a raft message that would corrupt raft, a call for
// another member's session, a gossip packet with the wrong key) and says so
// once: the first refusal of a kind from a source is logged at Warn, later
// ones within Interval only counted, and the next log line after the
// interval says how many were suppressed. A flood of bad packets costs a
// counter increment each, never a log line each.
package refuse

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// DefaultInterval is how long a (kind, source) pair stays quiet after it was
// logged.
const DefaultInterval = time.Minute

// maxSources bounds the remembered (kind, source) pairs, so that sources an
// attacker chooses (its addresses) cannot grow the map without bound; past
// it the oldest half is forgotten (and may be logged again).
const maxSources = 4096

// maxKinds bounds the kinds counted separately; further ones (a caller
// deriving kinds from input) are counted as otherKind.
const (
	maxKinds  = 256
	otherKind = "other"
)

// Log counts and rate-limits refusals. The zero value is not usable; make it
// with New. Safe for concurrent use.
type Log struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu     sync.Mutex
	seen   map[key]*entry
	counts map[string]uint64 // by kind, every refusal
}

type key struct{ kind, source string }

type entry struct {
	logged     time.Time
	suppressed uint64
}

// New returns a Log writing to l (nil discards). every <= 0 means
// DefaultInterval.
func New(l *slog.Logger, every time.Duration) *Log {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	if every <= 0 {
		every = DefaultInterval
	}
	return &Log{log: l, every: every, now: time.Now, seen: map[key]*entry{}, counts: map[string]uint64{}}
}

// Refuse records one refusal of kind (a short fixed phrase, e.g. "raft
// message") from source (a member id, 16 hex digits as views.MemberID
// writes it, or a remote IP) and logs it at Warn unless the same pair was
// logged within the interval. attrs are slog key/value pairs describing
// this refusal; they appear only when it is logged.
func (r *Log) Refuse(kind, source string, attrs ...any) {
	r.refuse(slog.LevelWarn, kind, source, attrs)
}

// Note is Refuse at Info: for refusals that correct peers also cause now
// and then (a member removed a moment ago still sending), counted and
// rate-limited the same way.
func (r *Log) Note(kind, source string, attrs ...any) {
	r.refuse(slog.LevelInfo, kind, source, attrs)
}

func (r *Log) refuse(level slog.Level, kind, source string, attrs []any) {
	if r == nil {
		return
	}
	now := r.now()
	r.mu.Lock()
	if _, ok := r.counts[kind]; !ok && len(r.counts) >= maxKinds {
		kind = otherKind
	}
	r.counts[kind]++
	k := key{kind, source}
	e := r.seen[k]
	if e != nil && now.Sub(e.logged) < r.every {
		e.suppressed++
		r.mu.Unlock()
		return
	}
	var suppressed uint64
	if e == nil {
		if len(r.seen) >= maxSources {
			r.forgetOldest()
		}
		e = &entry{}
		r.seen[k] = e
	} else {
		suppressed = e.suppressed
	}
	e.logged, e.suppressed = now, 0
	r.mu.Unlock()
	args := append([]any{"source", source}, attrs...)
	if suppressed > 0 {
		args = append(args, "suppressed_since_last_log", suppressed)
	}
	r.log.Log(context.Background(), level, "refused "+kind, args...)
}

// Count returns how many refusals of kind were recorded (logged or not).
func (r *Log) Count(kind string) uint64 {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[kind]
}

// forgetOldest drops the older half of the remembered pairs. Called with mu
// held, only when the map is full.
func (r *Log) forgetOldest() {
	var cut time.Time
	times := make([]time.Time, 0, len(r.seen))
	for _, e := range r.seen {
		times = append(times, e.logged)
	}
	slices.SortFunc(times, time.Time.Compare)
	cut = times[len(times)/2]
	for k, e := range r.seen {
		if !e.logged.After(cut) {
			delete(r.seen, k)
		}
	}
}
