package node

import (
	"slices"
	"time"

	"github.com/lockraft/lockraft/lockfsm"
)

// leaderDuties are the leader's expiry timers: session deadlines, per-lock
// lease deadlines and lock-delay ends. They live only on the leader, on its
// monotonic clock; followers never expire anything. When a deadline passes
// the leader proposes an entry (ExpireSession, ExpireLease, LiftDelay) and
// lockfsm applies it identically everywhere (S7).
//
// A new leader arms every deadline when its first entry of the term is
// applied (ready): a session from its latest checkpoint in the log if it is
// marked silent, else from that moment; then, once a majority's contact
// reports are in, from the earliest moment they prove (silence.go, which
// also gives the safety argument). A session silent for longer than
// silenceThreshold is checkpointed (KindCheckpoint) so that later leaders
// carry its silence over, and rule (R) holds back acknowledging it until a
// revive is applied.
type leaderDuties struct {
	term            uint64
	active          bool // leader, and its first entry of the term is applied
	planted         bool // TestHooks.FollowerExpiry's copy: expiries only
	sessions        map[uint64]*sessionTimer
	leases          map[leaseKey][]*deadline // by (name, token): the holds granted with a lease in that entry
	delays          map[string]*deadline     // by lock name; token = the entry that started the delay
	stepDownWaiters []chan struct{}

	readyAt time.Time         // when this leader armed its timers
	ckSeq   uint64            // counter of this leader's checkpoint entries (their Seq)
	revive  []uint64          // sessions whose revive is to be proposed this turn
	early   []keepaliveWaiter // confirmed before ready: answered at ready
	reports reportState
}

type deadline struct {
	at         time.Time
	ttl        time.Duration
	token      uint64
	heard      time.Time // leases: the last renewal received this term
	proposedAt time.Time // last time the expiry was proposed
	inherited  bool      // leases: armed at ready (granted in an earlier term)
	// A lease's hold: readers and semaphore permits granted in one entry
	// share a token, so their expiry names the session and owner too
	// (shared); the others' stays the version-1 command (name and token).
	session uint64
	owner   string
	shared  bool
}

// leaseKey is where the leader files a hold's lease: its name and token.
// Most keys have one hold; readers or permits granted in one entry share one.
type leaseKey struct {
	name  string
	token uint64
}

// ckState is what the log says of a session, as far as this leader knows.
type ckState uint8

const (
	ckLive      ckState = iota // no silent mark in force: the log gives no bound
	ckInherited                // a silent mark from an earlier leader
	ckMine                     // a silent mark this leader proposed
)

// sessionTimer is one session's deadline on the leader.
type sessionTimer struct {
	deadline           // at = base + ttl
	base     time.Time // no acknowledged keepalive was received after it (silence.go)
	ck       ckState
	ckBase   time.Time // ckMine: the base the latest mark states
	ckAt     time.Time // when the latest mark (silent or live) for it was proposed
	ckTag    uint64    // Seq of the entry carrying that mark
	parked   []keepaliveWaiter
}

// hear moves the base to a keepalive's receive time (never back).
func (t *sessionTimer) hear(recv time.Time) {
	if recv.After(t.heard) {
		t.heard = recv
	}
	if recv.After(t.base) {
		t.base = recv
		t.at = recv.Add(t.ttl)
	}
}

// ackable is rule (R): whether a keepalive received at recv may be answered.
func (t *sessionTimer) ackable(recv time.Time) bool {
	return t.ck == ckLive || (t.ck == ckMine && !recv.After(t.ckBase))
}

func (l *leaderDuties) init() {
	l.sessions = map[uint64]*sessionTimer{}
	l.leases = map[leaseKey][]*deadline{}
	l.delays = map[string]*deadline{}
	l.revive, l.early = nil, nil
	l.reports = reportState{}
}

// addLease starts the lease of one hold (it replaces an earlier deadline of
// the same hold: a new grant).
func (l *leaderDuties) addLease(name string, d *deadline) {
	k := leaseKey{name, d.token}
	for i, x := range l.leases[k] {
		if x.session == d.session && x.owner == d.owner {
			l.leases[k][i] = d
			return
		}
	}
	l.leases[k] = append(l.leases[k], d)
}

// dropLease forgets the lease of one hold.
func (l *leaderDuties) dropLease(name string, token, session uint64, owner string) {
	k := leaseKey{name, token}
	ds := l.leases[k]
	for i, x := range ds {
		if x.session == session && x.owner == owner {
			ds = append(ds[:i], ds[i+1:]...)
			break
		}
	}
	if len(ds) == 0 {
		delete(l.leases, k)
	} else {
		l.leases[k] = ds
	}
}

// findLease finds the lease of the hold (name, token, session, owner); with
// session 0 (a renewal in the version-1 format, which names no holder), the
// only hold filed under (name, token).
func (l *leaderDuties) findLease(name string, token, session uint64, owner string) *deadline {
	ds := l.leases[leaseKey{name, token}]
	if session == 0 {
		if len(ds) == 1 {
			return ds[0]
		}
		return nil
	}
	for _, d := range ds {
		if d.session == session && d.owner == owner {
			return d
		}
	}
	return nil
}

func (l *leaderDuties) becomeLeader(term uint64) {
	l.term = term
	l.active = false
	l.init()
}

// silenceThreshold: a session not heard from for this long is checkpointed
// (two keepalive intervals: a healthy one never is). checkpointPeriod: a
// silent session's mark is proposed again this often, so that replicas that
// restarted meanwhile apply a fresh one.
func (c Config) silenceThreshold() time.Duration { return 2 * c.KeepaliveInterval }

// markGrace: after taking over, a leader waits this long before it marks
// sessions it has not heard from (live ones need a round trip and a
// confirmation round to reach it).
func (c Config) markGrace() time.Duration {
	return min(c.silenceThreshold(), max(c.KeepaliveInterval/2, 3*c.TickInterval))
}
func (c Config) checkpointPeriod() time.Duration {
	return max(c.RetryInterval, c.electionTimeout()/2)
}

// ready arms every deadline: called when the empty entry of this leader's
// term is applied, i.e. the lock table is complete.
func (l *leaderDuties) ready(n *Node) {
	if l.active {
		return
	}
	l.active = true
	now := n.clock.Now()
	l.readyAt = now
	inherited := 0
	for _, s := range n.fsm.Sessions() {
		ttl := time.Duration(s.TTLMillis) * time.Millisecond
		t := &sessionTimer{deadline: deadline{ttl: ttl}, base: now}
		if n.k.RestartDeadlinesOnFailover {
			t.at = now.Add(ttl) // planted: the old behaviour
			l.sessions[s.Session] = t
			continue
		}
		if b, ok := n.loop.marks[s.Session]; ok && !s.Silent && n.k.ReviveAsSilenceZero {
			t.base, t.ck = b, ckInherited // planted: see TestHooks.ReviveAsSilenceZero
		}
		if s.Silent {
			// The earliest a − σ over the silent marks this node applied
			// since the session's last revive (silence.go).
			b, ok := n.loop.marks[s.Session]
			if !ok || b.After(now) {
				b = now.Add(-time.Duration(s.SilenceMillis) * time.Millisecond)
			}
			t.base, t.ck = b, ckInherited
			inherited++
			n.log.Debug("session base from its checkpoints", "session", s.Session, "silent_for", now.Sub(t.base))
		}
		t.at = t.base.Add(ttl)
		l.sessions[s.Session] = t
	}
	for _, li := range n.fsm.Locks() {
		for _, h := range li.Holds {
			if h.LeaseMillis == 0 || (len(h.Names) > 0 && h.Names[0] != li.Name) {
				continue // no lease, or a multi-name hold filed under its first name
			}
			ttl := time.Duration(h.LeaseMillis) * time.Millisecond
			l.addLease(li.Name, &deadline{at: now.Add(ttl), ttl: ttl, token: h.Token, session: h.Session,
				owner: h.Owner, shared: h.Mode == lockfsm.ModeShared || h.Permits > 0, inherited: true})
		}
		if li.Delayed {
			// The delay started when the expiry was applied; here that is
			// when this node applied it (after the commit), if it knows.
			start := now
			if m, ok := n.loop.delayed[li.Name]; ok && m.token == li.DelayToken && m.at.Before(now) {
				start = m.at
			}
			l.delays[li.Name] = &deadline{at: start.Add(n.cfg.LockDelay), token: li.DelayToken}
		}
	}
	n.log.Info("leader ready: expiry timers armed", "term", l.term, "sessions", len(l.sessions),
		"checkpointed", inherited)
	if !l.planted && !n.k.RestartDeadlinesOnFailover {
		l.startReports(n, now)
	}
	early := l.early
	l.early = nil
	for _, w := range early {
		l.keepalive(n, w)
	}
	l.flushRevives(n)
}

// startReports asks the voters of the configuration this node was elected
// in for their contact reports (silence.go); its own counts at once.
func (l *leaderDuties) startReports(n *Node, now time.Time) {
	cs := n.loop.electedIn
	if cs == nil || len(cs.GetVotersOutgoing()) > 0 || !slices.Contains(cs.GetVoters(), n.id) {
		return // joint or unknown configuration: no reports, the bases stand
	}
	r := &l.reports
	*r = reportState{wanted: true, voters: slices.Clone(cs.GetVoters()), got: map[uint64]*memberReport{}, started: now}
	r.need = len(r.voters)/2 + 1
	self := &memberReport{any: n.loop.seen.anyBound(l.term), start: n.loop.seen.start, sessions: map[uint64]time.Time{},
		opened: map[uint64]time.Time{}}
	for id := range l.sessions {
		self.sessions[id] = n.loop.seen.sessionBound(l.term, id)
		if t, ok := n.loop.opened[id]; ok {
			self.opened[id] = t
		}
	}
	l.addReport(n, n.id, self)
	n.issueConfirmRound(true)
}

// onReport takes a follower's contact report (from its answer to one of
// this leader's flagged rounds).
func (l *leaderDuties) onReport(n *Node, from, term uint64, b []byte, recv time.Time) {
	r := &l.reports
	if !l.active || !r.wanted || term != l.term || r.got[from] != nil || !slices.Contains(r.voters, from) {
		return
	}
	rep, ok := decodeReport(b, recv, n.cfg.DriftRatio)
	if !ok {
		n.log.Debug("bad contact report", "from", from)
		return
	}
	l.addReport(n, from, rep)
}

func (l *leaderDuties) addReport(n *Node, from uint64, rep *memberReport) {
	r := &l.reports
	r.got[from] = rep
	if len(r.got) < r.need {
		return
	}
	r.wanted = false
	moved := 0
	for id, t := range l.sessions {
		if t.ck == ckMine {
			continue
		}
		floor := r.openedFloor(id)
		if floor.IsZero() {
			floor = n.openedFloor(id)
		}
		v := later(r.kth(func(m *memberReport) time.Time { return m.session(id) }), floor)
		n.log.Debug("session base from contact reports", "session", id, "reported_silent_for", n.clock.Now().Sub(v),
			"silent_for", n.clock.Now().Sub(t.base), "state", t.ck)
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
			}
		}
	}
	n.log.Info("leader: deadlines carried over from a majority's contact reports", "term", l.term,
		"reporters", len(r.got), "sessions_moved", moved, "previous_leader_last_heard", n.clock.Now().Sub(anyV))
}

// stepDown is called when this node stops leading: its timers are dropped
// (the next leader arms its own) and held-back keepalives fail.
func (l *leaderDuties) stepDown() {
	for _, t := range l.sessions {
		for _, w := range t.parked {
			w.reply <- keepaliveNotLeader
		}
	}
	for _, w := range l.early {
		w.reply <- keepaliveNotLeader
	}
	l.active = false
	l.init()
	for _, c := range l.stepDownWaiters {
		close(c)
	}
	l.stepDownWaiters = nil
}

// onStepDown closes done when this node stops leading.
func (l *leaderDuties) onStepDown(done chan struct{}) {
	l.stepDownWaiters = append(l.stepDownWaiters, done)
}

// onEvent keeps the timers in step with the lock table.
func (l *leaderDuties) onEvent(n *Node, ev *lockfsm.Event) {
	if !l.active {
		return
	}
	now := n.clock.Now()
	switch ev.Kind {
	case lockfsm.EventSessionOpened:
		ttl := time.Duration(ev.TTLMillis) * time.Millisecond
		l.sessions[ev.Session] = &sessionTimer{deadline: deadline{at: now.Add(ttl), ttl: ttl}, base: now}
	case lockfsm.EventSessionEnded:
		if t := l.sessions[ev.Session]; t != nil {
			for _, w := range t.parked {
				w.reply <- keepaliveNoSession
			}
		}
		delete(l.sessions, ev.Session)
	case lockfsm.EventGranted:
		if ev.LeaseMillis > 0 {
			ttl := time.Duration(ev.LeaseMillis) * time.Millisecond
			l.addLease(ev.Name, &deadline{at: now.Add(ttl), ttl: ttl, token: ev.Token, session: ev.Session,
				owner: ev.Owner, shared: ev.Mode == lockfsm.ModeShared || ev.Permits > 0})
		}
		delete(l.delays, ev.Name)
		for _, x := range ev.ExtraNames {
			delete(l.delays, x)
		}
	case lockfsm.EventReleased:
		l.dropLease(ev.Name, ev.Token, ev.Session, ev.Owner)
	case lockfsm.EventDelayed:
		l.delays[ev.Name] = &deadline{at: now.Add(time.Duration(ev.DelayMillis) * time.Millisecond), token: ev.Token}
	}
}

// onLeaderResult notices lifted delays (a LiftDelay that found nobody to
// grant to produces no Granted event).
func (n *Node) onLeaderResult(_ uint64, cmd *lockfsm.Command, _ lockfsm.Result) {
	if cmd.Kind == lockfsm.KindLiftDelay {
		if d := n.loop.lead.delays[cmd.Name]; d != nil && d.token == cmd.Token {
			delete(n.loop.lead.delays, cmd.Name)
		}
		if m, ok := n.loop.delayed[cmd.Name]; ok && m.token == cmd.Token {
			delete(n.loop.delayed, cmd.Name)
		}
	}
}

// onCheckpointApplied runs on every node for every applied KindCheckpoint:
// for each silent mark it keeps the earliest base a − σ (a: this node's
// apply time) of the session's marks since its last revive (node memory,
// silence.go), and on the leader that proposed it, a revive that is the
// latest mark of its session releases the keepalives held back for it.
func (n *Node) onCheckpointApplied(cmd *lockfsm.Command) {
	now := n.clock.Now()
	l := &n.loop.lead
	mine := l.active && n.loop.isLeader && cmd.Token == l.term
	for _, m := range cmd.Checkpoints {
		if m.Live && n.k.ReviveAsSilenceZero && n.fsm.HasSession(m.Session) {
			n.loop.marks[m.Session] = now // planted: the revive as a mark of 0 ms
		} else if m.Live {
			delete(n.loop.marks, m.Session)
		} else if n.fsm.HasSession(m.Session) {
			b := now.Add(-time.Duration(m.SilenceMillis) * time.Millisecond)
			if old, ok := n.loop.marks[m.Session]; !ok || b.Before(old) {
				n.loop.marks[m.Session] = b
			}
		}
		t := l.sessions[m.Session]
		if !mine || t == nil || t.ckTag != cmd.Seq || !m.Live {
			continue
		}
		t.ck = ckLive
		for _, w := range t.parked {
			n.log.Debug("keepalive acknowledged after revive", "session", m.Session, "recv_ago", now.Sub(w.recv))
			w.reply <- keepaliveOK
		}
		t.parked = nil
	}
}

// tick proposes the expiry of every deadline that has passed, at most once
// per RetryInterval each (the entries are idempotent: a stale one is a
// no-op), and the checkpoints and revives that are due.
func (l *leaderDuties) tick(n *Node, now time.Time) {
	if !l.active {
		return
	}
	due := func(d *deadline) bool {
		if now.Before(d.at) {
			return false
		}
		if !d.proposedAt.IsZero() && now.Sub(d.proposedAt) < n.cfg.RetryInterval {
			return false
		}
		d.proposedAt = now
		return true
	}
	for id, t := range l.sessions {
		if due(&t.deadline) {
			n.log.Info("session expired; proposing expiry", "session", id, "ttl", t.ttl,
				"silent_for", now.Sub(t.base).Round(time.Millisecond))
			n.proposeSessionless(lockfsm.Command{
				Kind:            lockfsm.KindExpireSession,
				Session:         id,
				LockDelayMillis: uint64(n.cfg.LockDelay.Milliseconds()),
			})
		}
	}
	for k, ds := range l.leases {
		for _, d := range ds {
			if !due(d) {
				continue
			}
			c := lockfsm.Command{Kind: lockfsm.KindExpireLease, Name: k.name, Token: d.token}
			if d.shared {
				c.Session, c.Owner = d.session, d.owner
			}
			n.proposeSessionless(c)
		}
	}
	for name, d := range l.delays {
		if due(d) {
			n.proposeSessionless(lockfsm.Command{Kind: lockfsm.KindLiftDelay, Name: name, Token: d.token})
		}
	}
	if !l.planted {
		l.checkpoint(n, now)
	}
}

// checkpoint proposes one KindCheckpoint entry with the marks that are due:
// sessions silent past silenceThreshold (from markGrace after ready on),
// inherited marks once this leader's
// reports are in (it may know an earlier base, and its marks are applied
// fresh on restarted replicas), its own marks every checkpointPeriod, and
// revives held back more than RetryInterval.
func (l *leaderDuties) checkpoint(n *Node, now time.Time) {
	r := &l.reports
	if r.wanted && now.Sub(r.started) >= 2*n.cfg.electionTimeout() {
		n.log.Info("leader: no majority of contact reports; deadlines stay as armed", "term", l.term,
			"reporters", len(r.got))
		r.wanted = false
	}
	var marks []lockfsm.Checkpoint
	tag := l.ckSeq + 1
	// KindCheckpoint is a version-2 command that builds before the catalogue
	// stop at (ErrNewerVersion): no marks while a member is known to run
	// such a build (versiongate.go). Without marks a new leader has the
	// contact reports alone, and expiry only comes later.
	open := !n.olderMemberKnown()
	for id, t := range l.sessions {
		if !open {
			break
		}
		if !t.proposedAt.IsZero() {
			continue // expiring
		}
		if len(t.parked) > 0 {
			if now.Sub(t.ckAt) >= n.cfg.RetryInterval {
				l.revive = append(l.revive, id) // the last revive may have been dropped
			}
			continue
		}
		switch t.ck {
		case ckLive:
			// Not before live sessions have had time to reach this leader
			// (the election was silence too, and their keepalive senders
			// call a new leader at once): marking them would hold their
			// first keepalives back for a revive.
			if r.wanted || now.Sub(t.base) < n.cfg.silenceThreshold() || now.Sub(l.readyAt) < n.cfg.markGrace() {
				continue
			}
		case ckInherited:
			if r.wanted {
				continue
			}
		case ckMine:
			if now.Sub(t.ckAt) < n.cfg.checkpointPeriod() {
				continue
			}
		}
		silence := max(now.Sub(t.base), 0)
		marks = append(marks, lockfsm.Checkpoint{Session: id, SilenceMillis: uint64(silence / time.Millisecond)})
		t.ck, t.ckBase, t.ckAt, t.ckTag = ckMine, t.base, now, tag
	}
	if len(marks) > 0 {
		l.ckSeq = tag
		slices.SortFunc(marks, func(a, b lockfsm.Checkpoint) int { return compareU64(a.Session, b.Session) })
		n.log.Debug("checkpointing silent sessions", "sessions", len(marks))
		n.proposeSessionless(lockfsm.Command{Kind: lockfsm.KindCheckpoint, Token: l.term, Seq: tag, Checkpoints: marks})
	}
	l.flushRevives(n)
}

func compareU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// flushRevives proposes one entry marking live the sessions whose
// keepalives are held back (rule R).
func (l *leaderDuties) flushRevives(n *Node) {
	if len(l.revive) == 0 || !l.active {
		return
	}
	slices.Sort(l.revive)
	ids := slices.Compact(l.revive)
	l.revive = nil
	tag := l.ckSeq + 1
	var marks []lockfsm.Checkpoint
	now := n.clock.Now()
	for _, id := range ids {
		t := l.sessions[id]
		if t == nil || len(t.parked) == 0 {
			continue
		}
		marks = append(marks, lockfsm.Checkpoint{Session: id, Live: true})
		t.ckAt, t.ckTag = now, tag
	}
	if len(marks) == 0 {
		return
	}
	l.ckSeq = tag
	n.proposeSessionless(lockfsm.Command{Kind: lockfsm.KindCheckpoint, Token: l.term, Seq: tag, Checkpoints: marks})
}

// retry is part of the per-tick retry pass; expiries retry in tick.
func (l *leaderDuties) retry(*Node, time.Time) {}

// noteArrival moves a session's base when one of its keepalives arrives,
// before its confirmation round: the base only needs to be no earlier than
// what is acknowledged, and a keepalive on its way is not silence.
func (l *leaderDuties) noteArrival(sess uint64, recv time.Time) {
	if !l.active {
		return
	}
	if t := l.sessions[sess]; t != nil && t.proposedAt.IsZero() && t.ackable(recv) {
		t.hear(recv)
	}
}

// keepalive answers one confirmed session keepalive on the leader (rule R:
// it may be held back until a revive is applied).
func (l *leaderDuties) keepalive(n *Node, w keepaliveWaiter) {
	if !n.loop.isLeader {
		w.reply <- keepaliveNotLeader
		return
	}
	if !l.active {
		// Not ready yet: the lock table and the marks are not complete.
		l.early = append(l.early, w)
		return
	}
	t := l.sessions[w.session]
	if t == nil || !t.proposedAt.IsZero() {
		// Unknown, or its expiry is already proposed: acknowledging now
		// would let the holder believe in a session that is ending.
		w.reply <- keepaliveNoSession
		return
	}
	t.hear(w.recv)
	if t.ackable(w.recv) || n.k.AckWhileMarked {
		w.reply <- keepaliveOK
		return
	}
	t.parked = append(t.parked, w)
	if len(t.parked) == 1 {
		l.revive = append(l.revive, w.session)
	}
}

// renewLease restarts the lease of a hold on the leader, if the hold (name,
// token, and for a hold that may share its token, session and owner) still
// has it.
func (l *leaderDuties) renewLease(n *Node, name string, token, session uint64, owner string, now time.Time) keepaliveStatus {
	if !n.loop.isLeader || !l.active {
		return keepaliveNotLeader
	}
	d := l.findLease(name, token, session, owner)
	if d == nil || !d.proposedAt.IsZero() {
		return keepaliveNoSession
	}
	if now.After(d.heard) {
		d.heard = now
	}
	if at := now.Add(d.ttl); at.After(d.at) {
		d.at = at
	}
	return keepaliveOK
}

// followerExpiry is the planted bug TestHooks.FollowerExpiry: a follower
// expires other nodes' sessions on its own clock, with deadlines that no
// keepalive ever moves (keepalives reach only the leader). Its own session it
// trusts, as its keepalives are acknowledged.
func (n *Node) followerExpiry() {
	if !n.loop.local.active {
		n.loop.local.planted = true
		n.loop.local.ready(n)
	}
	delete(n.loop.local.sessions, n.loop.own.id)
	n.loop.local.tick(n, n.clock.Now())
}
