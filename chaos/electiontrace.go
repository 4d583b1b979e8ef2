package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ElectionTrace is a slog.Handler that keeps, from the nodes' raft logs, the
// steps of every election (pre-candidacies, candidacies, leaders, pre-votes
// a voter ignored because it still heard its leader) with their times, so
// that a leaderless stretch can be taken apart: how long until the first
// campaign (the randomised election timeout), how many candidate rounds it
// took, and why the extra ones (two candidates in one term: a split vote;
// pre-votes refused within the CheckQuorum lease). Every record is passed
// on to the next handler (if any). Handlers derived by WithAttrs and
// WithGroup share the trace.
type ElectionTrace struct {
	next slog.Handler
	rec  *electionRecord
}

type electionRecord struct {
	mu     sync.Mutex
	events []electionEvent
}

// NewElectionTrace returns a trace that passes records on to next (nil:
// none).
func NewElectionTrace(next slog.Handler) *ElectionTrace {
	return &ElectionTrace{next: next, rec: &electionRecord{}}
}

type electionKind uint8

const (
	evPreCandidate electionKind = iota + 1
	evCandidate
	evLeader
	evLeaseRefusal // a voter ignored a pre-vote: it heard a leader within an election timeout
)

type electionEvent struct {
	at   time.Time
	node uint64
	kind electionKind
	term uint64
}

// Enabled: raft's election steps are logged at debug level.
func (e *ElectionTrace) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps the election steps and passes every record on.
func (e *ElectionTrace) Handle(ctx context.Context, r slog.Record) error {
	if ev, ok := parseElectionStep(r.Message); ok {
		ev.at = r.Time
		e.rec.mu.Lock()
		e.rec.events = append(e.rec.events, ev)
		e.rec.mu.Unlock()
	}
	if e.next != nil && e.next.Enabled(ctx, r.Level) {
		return e.next.Handle(ctx, r)
	}
	return nil
}

// WithAttrs derives the next handler; the trace is shared.
func (e *ElectionTrace) WithAttrs(as []slog.Attr) slog.Handler {
	d := *e
	if d.next != nil {
		d.next = d.next.WithAttrs(as)
	}
	return &d
}

// WithGroup derives the next handler; the trace is shared.
func (e *ElectionTrace) WithGroup(name string) slog.Handler {
	d := *e
	if d.next != nil {
		d.next = d.next.WithGroup(name)
	}
	return &d
}

// parseElectionStep reads raft's "%x became candidate at term %d" and the
// like (go.etcd.io/raft/v3 raft.go).
func parseElectionStep(msg string) (electionEvent, bool) {
	var ev electionEvent
	switch {
	case strings.Contains(msg, " became pre-candidate at term "):
		ev.kind = evPreCandidate
	case strings.Contains(msg, " became candidate at term "):
		ev.kind = evCandidate
	case strings.Contains(msg, " became leader at term "):
		ev.kind = evLeader
	case strings.Contains(msg, "ignored MsgPreVote") && strings.Contains(msg, "lease is not expired"):
		ev.kind = evLeaseRefusal
	default:
		return ev, false
	}
	id, _, _ := strings.Cut(msg, " ")
	n, err := strconv.ParseUint(id, 16, 64)
	if err != nil {
		return ev, false
	}
	ev.node = n
	if i := strings.LastIndex(msg, " at term "); i >= 0 && ev.kind != evLeaseRefusal {
		t, _, _ := strings.Cut(msg[i+len(" at term "):], " ")
		ev.term, _ = strconv.ParseUint(t, 10, 64)
	}
	return ev, true
}

// failoverSteps is one leaderless stretch taken apart.
type failoverSteps struct {
	firstCampaign time.Duration // kill → the first pre-candidacy
	elected       time.Duration // kill → the first "became leader" (0: none in the stretch)
	rounds        int           // candidacies (a term each, or two candidates in one)
	splits        int           // terms with two candidates or more
	leaseRefusals int           // pre-votes ignored by voters that still heard a leader
	preRounds     int           // pre-candidacies
}

// steps takes the stretch [g.start, g.end] apart.
func (e *ElectionTrace) steps(g gap) failoverSteps {
	e.rec.mu.Lock()
	defer e.rec.mu.Unlock()
	var s failoverSteps
	cands := map[uint64]int{}
	for _, ev := range e.rec.events {
		if ev.at.Before(g.start) || (!g.end.IsZero() && ev.at.After(g.end)) {
			continue
		}
		switch ev.kind {
		case evPreCandidate:
			if s.preRounds == 0 {
				s.firstCampaign = ev.at.Sub(g.start)
			}
			s.preRounds++
		case evCandidate:
			s.rounds++
			if cands[ev.term]++; cands[ev.term] == 2 {
				s.splits++
			}
		case evLeader:
			if s.elected == 0 {
				s.elected = ev.at.Sub(g.start)
			}
		case evLeaseRefusal:
			s.leaseRefusals++
		}
	}
	return s
}

// ElectionBreakdown is where the leaderless time after leader kills went.
type ElectionBreakdown struct {
	Kills int
	// FirstCampaign: kill → the first pre-candidacy (the election timeout
	// still to run after the leader's last heartbeat).
	FirstCampaign Dist
	// Long: stretches over 2 election timeouts; of them, Split had a split
	// vote, Refused a pre-vote ignored within the CheckQuorum lease, Rounds
	// more than one candidate round for either reason or another.
	Long, Split, Refused, Rounds int
	// SplitKills, RefusedKills: all stretches with a split vote, with a
	// refused pre-vote.
	SplitKills, RefusedKills int

	first []time.Duration // FirstCampaign's samples
}

// breakdown takes every kill's stretch apart.
func (e *ElectionTrace) breakdown(gaps []gap, et time.Duration) *ElectionBreakdown {
	b := &ElectionBreakdown{}
	var first []time.Duration
	for _, g := range gaps {
		if g.isolated || g.end.IsZero() {
			continue
		}
		b.Kills++
		s := e.steps(g)
		if s.preRounds > 0 {
			first = append(first, s.firstCampaign)
		}
		if s.splits > 0 {
			b.SplitKills++
		}
		if s.leaseRefusals > 0 {
			b.RefusedKills++
		}
		if g.end.Sub(g.start) > 2*et {
			b.Long++
			if s.splits > 0 {
				b.Split++
			}
			if s.leaseRefusals > 0 {
				b.Refused++
			}
			if s.rounds > 1 {
				b.Rounds++
			}
		}
	}
	b.FirstCampaign, b.first = distOf(first), first
	return b
}

func (b *ElectionBreakdown) String() string {
	return fmt.Sprintf("%d kills: kill → first campaign %v; split votes in %d, pre-votes refused in the lease in %d; %d leaderless over 2 ET (%d with a split vote, %d with a refused pre-vote, %d with more than one candidate round)",
		b.Kills, b.FirstCampaign, b.SplitKills, b.RefusedKills, b.Long, b.Split, b.Refused, b.Rounds)
}

// merge adds o's stretches to b.
func (b *ElectionBreakdown) merge(o *ElectionBreakdown) {
	b.Kills += o.Kills
	b.Long += o.Long
	b.Split += o.Split
	b.Refused += o.Refused
	b.Rounds += o.Rounds
	b.SplitKills += o.SplitKills
	b.RefusedKills += o.RefusedKills
	b.first = append(b.first, o.first...)
	b.FirstCampaign = distOf(b.first)
}
