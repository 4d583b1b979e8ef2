package lease

import (
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/lockraft/lockraft/internal/views"
)

// Contact reports (doc.go, source 1): what each node saw of leaders, and a
// new leader's collection of a majority's reports.

// termTime is the latest moment a node saw something (a session in a
// round, or any leader), in the newest term it saw it in, and the latest
// moment it saw it in any older term.
type termTime struct {
	term   uint64
	at     time.Time
	before time.Time
}

func (c *termTime) record(term uint64, now time.Time) {
	switch {
	case term > c.term:
		if c.at.After(c.before) {
			c.before = c.at
		}
		c.term, c.at = term, now
	case term == c.term:
		c.at = now
	default: // an older leader's message: it counts as seen then
		c.before = now
	}
}

// bound is the latest moment seen in a term below term (zero: never).
func (c *termTime) bound(term uint64) time.Time {
	if c.term < term && c.at.After(c.before) {
		return c.at
	}
	return c.before
}

// contactLog is what this node saw of leaders.
type contactLog struct {
	start    time.Time // this incarnation's start: it knows nothing older
	any      termTime  // any message from a leader, or a round it issued
	sessions map[uint64]*termTime
}

func (c *contactLog) init(now time.Time) {
	c.start = now
	c.sessions = map[uint64]*termTime{}
}

func (c *contactLog) see(term uint64, sessions []uint64, now time.Time) {
	c.any.record(term, now)
	for _, s := range sessions {
		tt := c.sessions[s]
		if tt == nil {
			tt = &termTime{}
			c.sessions[s] = tt
		}
		tt.record(term, now)
	}
}

func (c *contactLog) forget(session uint64) { delete(c.sessions, session) }

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// anyBound and sessionBound are this node's upper bounds, for a leader of
// term, on when it last heard from an older leader / saw session in an older
// leader's round.
func (c *contactLog) anyBound(term uint64) time.Time { return later(c.any.bound(term), c.start) }

func (c *contactLog) sessionBound(term, session uint64) time.Time {
	if tt := c.sessions[session]; tt != nil {
		return later(tt.bound(term), c.start)
	}
	return c.start
}

// appendReport appends this node's contact report for a leader of term:
// per session the last time it saw it in an older leader's round, and when
// it applied its OpenSession (opened), both as elapsed times, +1 (0: none).
// The layout is heartbeat.go's.
func (c *contactLog) appendReport(b []byte, term uint64, now time.Time, opened map[uint64]time.Time) []byte {
	us := func(t time.Time) uint64 {
		if d := now.Sub(t); d > 0 {
			return uint64(d / time.Microsecond)
		}
		return 0
	}
	b = append(b, reportTag)
	b = protowire.AppendVarint(b, us(c.anyBound(term)))
	b = protowire.AppendVarint(b, us(c.start))
	ids := make([]uint64, 0, len(opened))
	for s := range opened {
		ids = append(ids, s)
	}
	for s := range c.sessions {
		if _, ok := opened[s]; !ok && c.sessionBound(term, s).After(c.start) {
			ids = append(ids, s)
		}
	}
	slices.Sort(ids)
	b = protowire.AppendVarint(b, uint64(len(ids)))
	for _, s := range ids {
		b = protowire.AppendVarint(b, s)
		var seen, op uint64
		if t := c.sessionBound(term, s); t.After(c.start) {
			seen = us(t) + 1
		}
		if t, ok := opened[s]; ok {
			op = us(t) + 1
		}
		b = protowire.AppendVarint(b, seen)
		b = protowire.AppendVarint(b, op)
	}
	return b
}

// memberReport is one voter's report, translated to the leader's clock.
type memberReport struct {
	any, start time.Time
	sessions   map[uint64]time.Time // seen in an older leader's round
	opened     map[uint64]time.Time // applied its OpenSession
}

func (r *memberReport) session(s uint64) time.Time {
	if t, ok := r.sessions[s]; ok {
		return t
	}
	return r.start
}

// decodeReport reads a follower's report received at recv. An elapsed time
// e measured on the follower's clock is at least e·(1−drift) of ours, so the
// moment it names is at most recv − e·(1−drift) on our clock (an upper bound:
// what is used as a lower bound on a base must be an upper bound on the
// moment).
func decodeReport(b []byte, recv time.Time, drift float64) (*memberReport, bool) {
	if len(b) == 0 || b[0] != reportTag {
		return nil, false
	}
	p := b[1:]
	next := func() (uint64, bool) {
		v, k := protowire.ConsumeVarint(p)
		if k < 0 {
			return 0, false
		}
		p = p[k:]
		return v, true
	}
	at := func(us uint64) time.Time {
		e := time.Duration(us) * time.Microsecond
		return recv.Add(-(e - time.Duration(float64(e)*drift)))
	}
	anyUS, ok1 := next()
	startUS, ok2 := next()
	cnt, ok3 := next()
	if !ok1 || !ok2 || !ok3 || cnt > uint64(len(p)) {
		return nil, false
	}
	r := &memberReport{any: at(anyUS), start: at(startUS), sessions: make(map[uint64]time.Time, cnt),
		opened: make(map[uint64]time.Time, cnt)}
	for range cnt {
		s, ok1 := next()
		seen, ok2 := next()
		op, ok3 := next()
		if !ok1 || !ok2 || !ok3 {
			return nil, false
		}
		if seen > 0 {
			r.sessions[s] = at(seen - 1)
		}
		if op > 0 {
			r.opened[s] = at(op - 1)
		}
	}
	return r, len(p) == 0
}

// reportState is a new leader's collection of contact reports.
//
// A majority of E is enough to decide (pending ends): then the bases move to
// the rank-th smallest reported moment, and marks may be proposed. It goes
// on collecting (wanted) until every voter of E answered or two election
// timeouts passed: every further report can only lower that rank-th
// smallest value, so each one moves bases earlier again. That matters
// under churn: a voter that restarted after a holder's last keepalive can
// only report its own start, and a majority that includes such voters
// would otherwise put the base at the latest of their restarts.
type reportState struct {
	wanted  bool     // collecting: rounds ask for reports
	pending bool     // asked, and no majority answered yet: the bases wait
	voters  []uint64 // the election configuration E
	need    int      // a majority of it
	got     map[uint64]*memberReport
	started time.Time
}

// openedFloor is the earliest apply time of session's OpenSession among the
// reporters (every one is after its commit, so after the holder sent it),
// or zero if none knows.
func (r *reportState) openedFloor(session uint64) time.Time {
	var floor time.Time
	for _, m := range r.got {
		if t, ok := m.opened[session]; ok && (floor.IsZero() || t.Before(floor)) {
			floor = t
		}
	}
	return floor
}

// kth returns the rank-th smallest of the reporters' values of f, rank =
// |E| − need + 1. A quorum Q of the acknowledging leader's configuration
// meets every majority of E (F2), so at most |E| − need voters of E are
// outside Q, and only those can report a moment before the keepalive; the
// rank-th smallest of any number of reports is then at or after it. With
// exactly a majority of reports (and |E| odd) it is their latest.
func (r *reportState) kth(f func(*memberReport) time.Time) time.Time {
	vals := make([]time.Time, 0, len(r.got))
	for _, m := range r.got {
		vals = append(vals, f(m))
	}
	slices.SortFunc(vals, func(a, b time.Time) int { return a.Compare(b) })
	return vals[len(r.voters)-r.need]
}

// openedFloor is the earliest base a session may have: when this node
// applied its OpenSession, after the holder sent it (the holder's first
// deadline counts from that send). Contact reports bound keepalives only.
func (e *Engine) openedFloor(session uint64, now time.Time) time.Time {
	if t, ok := e.opened[session]; ok {
		return t
	}
	return now
}

// startReports asks the voters of the configuration this node was elected
// in for their contact reports; its own counts at once. It reports whether
// it asked (not in a joint or unknown configuration: there the bases stand).
func (l *duties) startReports(e *Engine, now time.Time) bool {
	cs := e.electedIn
	if cs == nil || len(cs.GetVotersOutgoing()) > 0 || !slices.Contains(cs.GetVoters(), e.cfg.Self) {
		return false
	}
	r := &l.reports
	*r = reportState{wanted: true, pending: true, voters: slices.Clone(cs.GetVoters()), got: map[uint64]*memberReport{}, started: now}
	r.need = len(r.voters)/2 + 1
	self := &memberReport{any: e.seen.anyBound(l.term), start: e.seen.start, sessions: map[uint64]time.Time{},
		opened: map[uint64]time.Time{}}
	for id := range l.sessions {
		self.sessions[id] = e.seen.sessionBound(l.term, id)
		if t, ok := e.opened[id]; ok {
			self.opened[id] = t
		}
	}
	l.addReport(e, e.cfg.Self, self, now)
	return true
}

// onReport takes a follower's contact report (from its answer to one of
// this leader's flagged rounds).
func (l *duties) onReport(e *Engine, from, term uint64, b []byte, recv time.Time) {
	r := &l.reports
	if !l.active || !r.wanted || term != l.term || r.got[from] != nil || !slices.Contains(r.voters, from) {
		return
	}
	rep, ok := decodeReport(b, recv, e.cfg.DriftRatio)
	if !ok {
		e.log.Debug("bad contact report", "from", views.MemberID(from))
		return
	}
	l.addReport(e, from, rep, recv)
}

// addReport counts one voter's report; with a majority in, it moves every
// base it can to the rank-th smallest moment the reports prove (kth), and
// again with each later report.
func (l *duties) addReport(e *Engine, from uint64, rep *memberReport, now time.Time) {
	r := &l.reports
	r.got[from] = rep
	if len(r.got) < r.need {
		return
	}
	r.pending = false
	if len(r.got) == len(r.voters) {
		r.wanted = false
	}
	moved := 0
	for _, id := range sortedIDs(l.sessions) {
		t := l.sessions[id]
		if t.ck == ckMine {
			continue
		}
		floor := r.openedFloor(id)
		if floor.IsZero() {
			floor = e.openedFloor(id, now)
		}
		v := later(r.kth(func(m *memberReport) time.Time { return m.session(id) }), floor)
		e.log.Debug("session base from contact reports", "session", id, "reported_silent_for", now.Sub(v),
			"silent_for", now.Sub(t.base), "state", t.ck)
		if v.Before(t.base) {
			t.base = later(v, t.heard)
			t.at = t.base.Add(t.ttl)
			moved++
		}
	}
	anyV := r.kth(func(m *memberReport) time.Time { return m.any })
	for _, ds := range l.leases {
		for _, d := range ds {
			// Only leases granted in an earlier term: the grant's append
			// reached a quorum after the holder sent its Acquire.
			if at := anyV.Add(d.ttl); d.inherited && at.Before(d.at) {
				d.at = later(at, d.heard.Add(d.ttl))
				l.queue.schedule(d, d.at)
			}
		}
	}
	e.log.Info("leader: deadlines carried over from a majority's contact reports", "term", l.term,
		"reporters", len(r.got), "sessions_moved", moved, "previous_leader_last_heard", now.Sub(anyV))
}
