package node

// Carrying a session's silence across leader changes (L3 under churn).
//
// Only the leader keeps session deadlines, on its monotonic clock, and
// keepalives are not logged. A leader that takes over must still expire a
// crashed holder's session within TTL (plus one election) of the holder's
// last keepalive, however many leaders came before it, and never before the
// holder itself gives up (S5). Restarting every deadline from the new
// leader's first entry (etcd's Promote, Consul) is safe but loses the whole
// failover, every failover: under churn a crashed holder's locks were held
// for ever (issue 15).
//
// The quantity a leader needs per session is its base: a moment no
// keepalive of that session acknowledged by any leader, this one or an
// earlier one, was received after. The session expires at base + TTL.
//
// S5 holds if every leader's base is never earlier than the receive time r
// of any acknowledged keepalive: the holder counts its own deadline from the
// keepalive's send time s < r, minus the drift margin (holderMargin), so it
// gives up before base + TTL. Durations measured on one node's clock and
// used on another's differ by at most DriftRatio; the margin covers that, as
// it covers the TTL itself today. Two facts the rest leans on:
//
//	(F1) A keepalive is acknowledged only after a ReadIndex round issued
//	     after it arrived has been answered by a quorum (confirm.go): a
//	     quorum Q received a heartbeat of the acknowledging leader's term
//	     after r.
//	(F2) Raft: a quorum of the configuration in force when a later leader
//	     was elected (the election configuration E) intersects Q, the same
//	     intersection that makes ReadIndex linearizable and that confirm.go
//	     already relies on.
//
// A new leader takes, per session, the earliest base it can prove, from two
// sources, and uses the earlier (the minimum of two valid bounds is valid).
//
// 1. Contact reports (this file). Every node remembers, per session, when it
// last saw that session in a confirmation round (the round's heartbeat
// carries the sessions of its waiters: confirm.go), tagged with the round's
// term, and when it last heard from any leader; a leader records its own
// rounds when it issues them. A node that restarted knows nothing older
// than its start, and reports its start time for what it has not seen
// since. The new leader of term T flags its first rounds; a follower at term
// T answering such a heartbeat appends, per session, how long ago it last
// saw it in a round of a term below T. For each session the leader takes,
// among the reports of the voters of E (itself included), the k-th smallest
// value, k a majority of E. By F1 every member of Q saw the session at or
// after r (or restarted after r and reports its start), by F2 at most
// |E| − k < k reporters are outside Q, so the k-th smallest is ≥ r. A report
// is only taken from a follower already at term T: it rejects every
// heartbeat of an older leader from then on, so no older round can complete
// with it after it reported. For a crashed holder the reports give (about)
// the receive time of its last keepalive: the failover costs nothing, even
// when the leader that saw that keepalive died right after it. The holder
// also counts from the send of its OpenSession, which no round names: the
// base never goes below the earliest time a reporter applied that entry
// (after its commit, so after the send; a reporter that restarted since
// only knows its replay, later). Leases use
// the same reports' "any leader contact" value (renewals go through the
// same rounds), lock-delays the local apply time of the expiry that started
// them.
//
// 2. Checkpoints in the log (lockfsm.KindCheckpoint, leader.go), for when
// the reports cannot say (a majority restarted since). A leader proposes,
// for every session silent longer than silenceThreshold (and, after its
// reports, for every session it has not heard from), a mark with the
// silence σ = now − base it measured, and repeats it every
// checkpointPeriod while the session stays silent. Each node notes its own
// monotonic time a when it applies a mark (node memory, not lockfsm state;
// after a restart or a snapshot restore, the time it loaded the state) and
// keeps, per session, the earliest a − σ of the silent marks it applied
// since the session's last revive; a later leader takes that as the base.
// Since a is after the proposal, a − σ is never earlier than the proposer's
// base, and so never earlier than any keepalive acknowledged before the
// proposal. (Each of those marks is a valid bound on its own while no
// revive follows it. Taking the latest mark's alone loses the election
// whenever the old leader died between proposing a mark and the followers
// learning it committed: the new leader then applies it at its own first
// entry.) For keepalives acknowledged after a mark, the rule:
//
//	(R) Once a leader has proposed a mark for a session, it acknowledges a
//	    keepalive of that session received after the mark's base only after
//	    a later Live mark for it (a revive), proposed by itself, has been
//	    applied on itself. A leader that inherits a mark from the log
//	    acknowledges nothing for that session before its own revive is
//	    applied (its a differs from the proposer's).
//
// So if the latest mark a later leader applies for a session is a silent
// one, no keepalive received after its base was acknowledged by anyone: an
// acknowledgement would have needed a revive applied after it, which every
// later leader has (it is committed, and a leader applies every committed
// entry before it arms anything). If the latest is a revive (or there is
// none), the log gives no bound and the leader uses the reports, or its own
// first entry. A revive therefore does not mean "silence 0 at apply time":
// that would let a leader expire a session whose holder was acknowledged
// after the revive (the holder keeps sending for a TTL after it).
//
// With a mark applied promptly by every replica, a failover costs only the
// time from proposing the latest mark to applying it (a commit), not the
// election; the marks are re-proposed while the session stays silent so
// that a replica which restarted meanwhile does not fall back to its
// restart time.
//
// The bound (L3). A crashed holder's lock is granted TTL after its last
// keepalive, plus the time the cluster had no leader after that deadline
// (the election in progress then: under 2 election timeouts unless raft
// needs a second round), plus a few round trips and fsyncs. One corner costs
// up to silenceThreshold more: the leader that saw the last keepalive is
// lost before its first mark for the session commits (so every replica
// applies that mark only at the next leader's first entry), and a voter of
// the next leader's reporting majority restarted after the keepalive (its
// report can only say "not since my start"). TestCrashedHolderReleased-
// UnderLeaderChurn and the chaos fault leader-churn check this bound.

import (
	"slices"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/lockraft/lockraft/lockfsm"
)

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

// contactLog is what this node saw of leaders: owned by the loop.
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

// Heartbeat extensions. Raft's ReadIndex heartbeats carry an 8-byte
// position (read_only.go: heartbeatCtx), which followers echo and the
// leader reads back with binary.LittleEndian.Uint64, i.e. its first 8 bytes
// only. A leader appends to every such heartbeat the sessions of all its
// unanswered confirmation rounds: a quorum's answer to a heartbeat of
// position P confirms exactly the rounds issued before raft built it, all
// of which were unanswered then, so every confirmed keepalive's session
// reached each member of the confirming quorum after the keepalive arrived
// (F1 in terms of sessions).
//
//	position (8 bytes), 'k', flags, uvarint count, count × uvarint session
//
// flags bit 0: contact reports wanted. A follower answers with the position
// and, if asked, its report instead of the echoed extension:
//
//	position (8 bytes), 'R', uvarint µs since any older leader, uvarint µs
//	since its start, uvarint count, count × (uvarint session, uvarint µs
//	since seen)
//
// and the leader cuts the answer back to the position before raft sees it.
const (
	hbPosLen         = 8
	hbExtTag         = 'k'
	roundWantsReport = 1
	reportTag        = 'R'
)

func appendHeartbeatExt(b []byte, flags byte, sessions []uint64) []byte {
	b = append(b, hbExtTag, flags)
	b = protowire.AppendVarint(b, uint64(len(sessions)))
	for _, s := range sessions {
		b = protowire.AppendVarint(b, s)
	}
	return b
}

// parseHeartbeatExt reads a heartbeat context's extension; ok is false for
// a plain context (or anything else).
func parseHeartbeatExt(ctx []byte) (flags byte, sessions []uint64, ok bool) {
	if len(ctx) < hbPosLen+3 || ctx[hbPosLen] != hbExtTag {
		return 0, nil, false
	}
	flags = ctx[hbPosLen+1]
	p := ctx[hbPosLen+2:]
	cnt, k := protowire.ConsumeVarint(p)
	if k < 0 || cnt > uint64(len(p)) {
		return 0, nil, false
	}
	p = p[k:]
	sessions = make([]uint64, 0, cnt)
	for range cnt {
		v, k := protowire.ConsumeVarint(p)
		if k < 0 {
			return 0, nil, false
		}
		sessions = append(sessions, v)
		p = p[k:]
	}
	return flags, sessions, len(p) == 0
}

// appendReport appends this node's contact report for a leader of term:
// per session the last time it saw it in an older leader's round, and when
// it applied its OpenSession (opened), both as elapsed times, +1 (0: none).
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
type reportState struct {
	wanted  bool     // collecting
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

// kth returns the need-th smallest of the reporters' values of f.
func (r *reportState) kth(f func(*memberReport) time.Time) time.Time {
	vals := make([]time.Time, 0, len(r.got))
	for _, m := range r.got {
		vals = append(vals, f(m))
	}
	slices.SortFunc(vals, func(a, b time.Time) int { return a.Compare(b) })
	return vals[r.need-1]
}

// delayMark is when this node applied the expiry that started a
// lock-delay (token: that entry's index).
type delayMark struct {
	token uint64
	at    time.Time
}

// noteLoadedMarks dates the silent marks of a lock table just loaded (at
// start, or restored from a snapshot): this node applied the latest one no
// later than now, which is all it can say (a later a is conservative).
func (n *Node) noteLoadedMarks() {
	now := n.clock.Now()
	n.loop.marks = map[uint64]time.Time{}
	n.loop.opened = map[uint64]time.Time{}
	for _, s := range n.fsm.Sessions() {
		n.loop.opened[s.Session] = now
		if s.Silent {
			n.loop.marks[s.Session] = now.Add(-time.Duration(s.SilenceMillis) * time.Millisecond)
		}
	}
}

// openedFloor is the earliest base a session may have: when this node
// applied its OpenSession, after the holder sent it (the holder's first
// deadline counts from that send). Contact reports bound keepalives only.
func (n *Node) openedFloor(session uint64) time.Time {
	if t, ok := n.loop.opened[session]; ok {
		return t
	}
	return n.clock.Now()
}

// noteEvent keeps this node's memory of sessions and delays in step with
// the lock table (every node: any of them may lead next).
func (n *Node) noteEvent(ev *lockfsm.Event) {
	switch ev.Kind {
	case lockfsm.EventSessionOpened:
		n.loop.opened[ev.Session] = n.clock.Now()
	case lockfsm.EventSessionEnded:
		delete(n.loop.marks, ev.Session)
		delete(n.loop.opened, ev.Session)
		n.loop.seen.forget(ev.Session)
	case lockfsm.EventDelayed:
		n.loop.delayed[ev.Name] = delayMark{token: ev.Token, at: n.clock.Now()}
	case lockfsm.EventGranted:
		delete(n.loop.delayed, ev.Name)
	}
}

// noteLeaderContact records a message from a leader (before raft steps it):
// a heartbeat of confirmation rounds also names their sessions.
func (n *Node) noteLeaderContact(m *raftpb.Message, now time.Time) {
	switch m.GetType() {
	case raftpb.MessageType_MsgHeartbeat:
		if _, sessions, ok := parseHeartbeatExt(m.GetContext()); ok {
			n.loop.seen.see(m.GetTerm(), sessions, now)
			n.leaderSeen.Advance(now)
			return
		}
	case raftpb.MessageType_MsgApp, raftpb.MessageType_MsgSnap:
	default:
		return
	}
	n.loop.seen.any.record(m.GetTerm(), now)
	n.leaderSeen.Advance(now)
}

// extendHeartbeat appends ext (the sessions of the leader's unanswered
// rounds) to an outgoing ReadIndex heartbeat (a copy: raft may still hold
// the context).
func extendHeartbeat(m *raftpb.Message, ext []byte) {
	ctx := m.GetContext()
	if len(ctx) != hbPosLen || len(ext) == 0 {
		return
	}
	b := make([]byte, 0, hbPosLen+len(ext))
	m.Context = append(append(b, ctx...), ext...)
}

// heartbeatExt is this turn's extension for the leader's heartbeats: the
// sessions of every unanswered round, and whether reports are wanted.
func (n *Node) heartbeatExt() []byte {
	c := &n.loop.confirm
	reports := n.loop.lead.reports.wanted
	if len(c.rounds) == 0 && !reports {
		return nil
	}
	if st, _, _ := n.localGate(); st != gateOpen {
		// A member of a build before this extension may refuse a heartbeat
		// context above 64 bytes: none until every member is known to have
		// it (versiongate.go). Without it a new leader gets no reports and
		// keeps the bases it armed: expiry only comes later.
		return nil
	}
	var sessions []uint64
	for _, r := range c.rounds {
		sessions = append(sessions, r.sessions...)
	}
	slices.Sort(sessions)
	sessions = slices.Compact(sessions)
	var flags byte
	if reports {
		flags |= roundWantsReport
	}
	return appendHeartbeatExt(nil, flags, sessions)
}

// answerHeartbeat replaces the echoed extension of this follower's answer
// to a heartbeat by its contact report, if the leader asked, or by nothing.
func (n *Node) answerHeartbeat(m *raftpb.Message) {
	ctx := m.GetContext()
	flags, _, ok := parseHeartbeatExt(ctx)
	if !ok {
		return
	}
	b := make([]byte, hbPosLen, hbPosLen+64)
	copy(b, ctx[:hbPosLen])
	if flags&roundWantsReport != 0 {
		b = n.loop.seen.appendReport(b, m.GetTerm(), n.clock.Now(), n.loop.opened)
	}
	m.Context = b
}

// takeContactReport cuts a follower's answer back to raft's position and
// hands its report, if any, to the leader's duties.
func (n *Node) takeContactReport(m *raftpb.Message) {
	ctx := m.GetContext()
	if len(ctx) <= hbPosLen || ctx[hbPosLen] != reportTag {
		return
	}
	if n.loop.isLeader {
		n.loop.lead.onReport(n, m.GetFrom(), m.GetTerm(), ctx[hbPosLen:], n.clock.Now())
	}
	m.Context = ctx[:hbPosLen]
}
