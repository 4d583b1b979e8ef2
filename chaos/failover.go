package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node"
)

// What a leader kill costs, measured from the applied log: how long the
// cluster had no leader after each kill, how long until anything was granted
// anywhere, and, per name, how long a hold of a dead incarnation's session
// stayed in the way (until its release, which hands the name to the next
// waiter in the same entry).

// Kinds of lifeRec.
const (
	lifeOpened   uint8 = iota + 1 // a session opened on Node
	lifeEnded                     // a session ended (closed or expired)
	lifeGranted                   // a hold of Names for Owner of Session
	lifeReleased                  // that hold ended
)

// lifeRec is one change in who holds what, from an applied entry.
type lifeRec struct {
	K       uint8    `json:"k"`
	Session uint64   `json:"s,omitempty"`
	Node    uint64   `json:"n,omitempty"`
	Owner   string   `json:"o,omitempty"`
	Names   []string `json:"ns,omitempty"`
}

// lifeOf is an applied entry's session and hold changes.
func lifeOf(r node.ApplyRecord) []lifeRec {
	var out []lifeRec
	for _, e := range r.Events {
		var k uint8
		switch e.Kind {
		case lockfsm.EventSessionOpened:
			k = lifeOpened
		case lockfsm.EventSessionEnded:
			k = lifeEnded
		case lockfsm.EventGranted:
			k = lifeGranted
		case lockfsm.EventReleased:
			k = lifeReleased
		default:
			continue
		}
		rec := lifeRec{K: k, Session: e.Session, Node: e.Node, Owner: e.Owner}
		if k == lifeGranted || k == lifeReleased {
			rec.Names = append([]string{e.Name}, e.ExtraNames...)
		}
		out = append(out, rec)
	}
	return out
}

// lifeAt is a lifeRec with the index of its entry and when a replica first
// applied it.
type lifeAt struct {
	lifeRec
	index uint64
	at    time.Time
}

// death is one node killed: when, and when it ran again (zero: not before
// the measurement).
type death struct {
	id       uint64
	at, back time.Time
}

// deadHold is one hold of a dead incarnation's session, as long as it stood
// in the way: from the death (or its grant, for a waiter of the dead
// session granted afterwards) to its release.
type deadHold struct {
	name, owner string
	victim      uint64
	death, from time.Time
	freed       time.Time // zero: still held when the measurement ended
}

type holdKey struct {
	name, owner string
	session     uint64
}

// deadHolds replays the life records (in index order) and returns every
// hold that a session of a killed node had at its death or was granted
// while dead. A session is dead from its node's death until it ends; one
// its node opened between the death and the restart (a proposal of the
// dead incarnation committed late) is dead too.
func deadHolds(life []lifeAt, deaths []death) []deadHold {
	deaths = slices.Clone(deaths)
	slices.SortFunc(deaths, func(a, b death) int { return a.at.Compare(b.at) })
	sessNode := map[uint64]uint64{}
	open := map[uint64]bool{}
	holds := map[holdKey]bool{}
	dead := map[uint64]int{} // session -> index in deaths
	blocks := map[holdKey]*deadHold{}
	var out []deadHold
	block := func(k holdKey, d int, from time.Time) {
		if _, ok := blocks[k]; !ok {
			blocks[k] = &deadHold{name: k.name, owner: k.owner, victim: deaths[d].id, death: deaths[d].at, from: from}
		}
	}
	free := func(k holdKey, at time.Time) {
		if b, ok := blocks[k]; ok {
			b.freed = at
			out = append(out, *b)
			delete(blocks, k)
		}
	}
	die := func(d int) {
		for s := range open {
			if sessNode[s] == deaths[d].id {
				if _, ok := dead[s]; !ok {
					dead[s] = d
				}
			}
		}
		for k := range holds {
			if dd, ok := dead[k.session]; ok && dd == d {
				block(k, d, deaths[d].at)
			}
		}
	}
	next := 0
	for _, r := range life {
		for ; next < len(deaths) && !deaths[next].at.After(r.at); next++ {
			die(next)
		}
		switch r.K {
		case lifeOpened:
			sessNode[r.Session], open[r.Session] = r.Node, true
			for d := next - 1; d >= 0; d-- {
				if deaths[d].id == r.Node {
					if deaths[d].back.IsZero() || r.at.Before(deaths[d].back) {
						dead[r.Session] = d
					}
					break
				}
			}
		case lifeEnded:
			delete(open, r.Session)
			for k := range holds {
				if k.session == r.Session {
					delete(holds, k)
					free(k, r.at)
				}
			}
		case lifeGranted, lifeReleased:
			for _, name := range r.Names {
				k := holdKey{name: name, owner: r.Owner, session: r.Session}
				if r.K == lifeReleased {
					delete(holds, k)
					free(k, r.at)
					continue
				}
				holds[k] = true
				if d, ok := dead[r.Session]; ok {
					block(k, d, r.at)
				}
			}
		}
	}
	for ; next < len(deaths); next++ {
		die(next)
	}
	for _, b := range blocks {
		out = append(out, *b)
	}
	slices.SortFunc(out, func(a, b deadHold) int {
		if c := a.death.Compare(b.death); c != 0 {
			return c
		}
		return strings.Compare(a.name+"\x00"+a.owner, b.name+"\x00"+b.owner)
	})
	return out
}

// Dist is a distribution's size and marks.
type Dist struct {
	N             int
	P50, P99, Max time.Duration
}

func distOf(ds []time.Duration) Dist {
	if len(ds) == 0 {
		return Dist{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(float64(len(s))*p+0.999999) - 1 // nearest rank
		return s[max(0, min(i, len(s)-1))]
	}
	return Dist{N: len(s), P50: rank(0.5), P99: rank(0.99), Max: s[len(s)-1]}
}

func (d Dist) String() string {
	if d.N == 0 {
		return "-"
	}
	r := func(x time.Duration) time.Duration { return x.Round(time.Millisecond) }
	return fmt.Sprintf("%v / %v / %v", r(d.P50), r(d.P99), r(d.Max))
}

// FailoverSummary is what the leader kills of a run cost (leader-churn).
type FailoverSummary struct {
	Members int
	TTL, ET time.Duration // session TTL, election timeout
	// Kills counts leader kills; Isolations leader isolations (5 members:
	// a probe's waiter that leads is cut off instead of killed).
	Kills, Isolations int
	// Leaderless: from each leader kill until another member was seen
	// leading. NoGrant: from each leader kill until any grant applied.
	Leaderless, NoGrant Dist
	// DeadHolds: holds of killed members' sessions (leaders and probe
	// holders) and how long each stood in the way, from the death to its
	// release: Freed, per name its maximum (NameMax).
	DeadHolds int
	Freed     Dist
	NameMax   map[string]time.Duration
	// Over is the worst (death → release) − (leaderless time after
	// death + TTL) − TTL: L3's bound asks it stay within the slack.
	Over  time.Duration
	Worst string // the hold behind Over
	// Pending: holds not released when the measurement ended.
	Pending int
	// Elections: where the leaderless time went (RunConfig.Trace only).
	Elections *ElectionBreakdown

	// The samples behind the distributions (merge).
	leaderless, noGrant, freed []time.Duration
}

// merge adds o's samples to s (runs of several seeds).
func (s *FailoverSummary) merge(o *FailoverSummary) {
	s.Kills += o.Kills
	s.Isolations += o.Isolations
	s.DeadHolds += o.DeadHolds
	s.Pending += o.Pending
	s.leaderless = append(s.leaderless, o.leaderless...)
	s.noGrant = append(s.noGrant, o.noGrant...)
	s.freed = append(s.freed, o.freed...)
	s.Leaderless, s.NoGrant, s.Freed = distOf(s.leaderless), distOf(s.noGrant), distOf(s.freed)
	if s.NameMax == nil {
		s.NameMax = map[string]time.Duration{}
	}
	for n, d := range o.NameMax {
		s.NameMax[n] = max(s.NameMax[n], d)
	}
	if o.Elections != nil {
		if s.Elections == nil {
			s.Elections = &ElectionBreakdown{}
		}
		s.Elections.merge(o.Elections)
	}
	if o.Over > s.Over || s.Worst == "" {
		s.Over, s.Worst = o.Over, o.Worst
	}
}

// summarizeFailover measures gaps (the churn's hits) and deaths against the
// applied log's life records; it returns the summary and every dead hold
// with its excess over TTL + leaderless time.
func summarizeFailover(members int, ttl, et time.Duration, gaps []gap, deaths []death, life []lifeAt) (*FailoverSummary, []deadHold) {
	s := &FailoverSummary{Members: members, TTL: ttl, ET: et, NameMax: map[string]time.Duration{}}
	var leaderlessTimes, noGrant []time.Duration
	var grants []time.Time
	for _, r := range life {
		if r.K == lifeGranted {
			grants = append(grants, r.at)
		}
	}
	for _, g := range gaps {
		if g.isolated {
			s.Isolations++
			continue
		}
		s.Kills++
		if !g.end.IsZero() {
			leaderlessTimes = append(leaderlessTimes, g.end.Sub(g.start))
		}
		if i, _ := slices.BinarySearchFunc(grants, g.start, func(a, b time.Time) int { return a.Compare(b) }); i < len(grants) {
			noGrant = append(noGrant, grants[i].Sub(g.start))
		}
	}
	s.Leaderless, s.NoGrant = distOf(leaderlessTimes), distOf(noGrant)
	s.leaderless, s.noGrant = leaderlessTimes, noGrant
	holds := deadHolds(life, deaths)
	s.DeadHolds = len(holds)
	var freed []time.Duration
	s.Over = -ttl
	for _, h := range holds {
		if h.freed.IsZero() {
			s.Pending++
			continue
		}
		took := h.freed.Sub(h.death)
		freed = append(freed, took)
		s.NameMax[h.name] = max(s.NameMax[h.name], took)
		over := took - leaderless(gaps, h.death.Add(ttl), h.freed) - ttl
		if over > s.Over {
			s.Over = over
			s.Worst = fmt.Sprintf("%s of %s (n%d killed): released %v after the kill, %v after it was granted",
				h.name, h.owner, h.victim, took.Round(time.Millisecond), h.freed.Sub(h.from).Round(time.Millisecond))
		}
	}
	s.Freed, s.freed = distOf(freed), freed
	return s, holds
}

// failoverVerdicts: a dead hold released later than TTL + slack + the
// leaderless time after death + TTL breaks L3 (the holder's last keepalive
// was no later than its death).
func failoverVerdicts(s *FailoverSummary, holds []deadHold, gaps []gap, slack time.Duration, viol func(string, ...any)) {
	bad := 0
	for _, h := range holds {
		if h.freed.IsZero() {
			continue
		}
		took := h.freed.Sub(h.death)
		lless := leaderless(gaps, h.death.Add(s.TTL), h.freed)
		if took-lless > s.TTL+slack {
			if bad++; bad <= 5 {
				viol("L3: %s held by %s of killed n%d released %v after the kill, %v of it without a leader after death + TTL (TTL %v + slack %v)",
					h.name, h.owner, h.victim, took.Round(time.Millisecond), lless.Round(time.Millisecond), s.TTL, slack)
			}
		}
	}
	if bad > 5 {
		viol("L3: %d dead holds released late in all", bad)
	}
}

// String is the summary as one note.
func (s *FailoverSummary) String() string {
	var names []string
	for n := range s.NameMax {
		names = append(names, n)
	}
	slices.Sort(names)
	var per []string
	for _, n := range names {
		per = append(per, fmt.Sprintf("%s %v", n, s.NameMax[n].Round(time.Millisecond)))
	}
	if len(per) > 8 {
		per = append(per[:8], "…")
	}
	el := ""
	if s.Elections != nil {
		el = "; elections: " + s.Elections.String()
	}
	return fmt.Sprintf("failover (%d members, ET %v, TTL %v): %d leader kills, %d isolations; leaderless p50/p99/max %v; kill → next grant anywhere %v; %d dead holds (%d pending), death → release %v, per name max [%s]; worst over TTL + leaderless: %v (%s)%s",
		s.Members, s.ET, s.TTL, s.Kills, s.Isolations, s.Leaderless, s.NoGrant, s.DeadHolds, s.Pending, s.Freed,
		strings.Join(per, ", "), s.Over.Round(time.Millisecond), s.Worst, el)
}
