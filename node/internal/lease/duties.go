package lease

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/lockraft/lockraft/lockfsm"
)

// duties are the leader's expiry timers: session deadlines, per-lock lease
// deadlines and lock-delay ends. They live only on the leader, on its
// monotonic clock; followers never expire anything. When a deadline passes
// the leader proposes an entry (ExpireSession, ExpireLease, LiftDelay) and
// lockfsm applies it identically everywhere (S7).
//
// A new leader arms every deadline when its first entry of the term is
// applied (arm): a session from its latest checkpoint in the log if it is
// marked silent, else from that moment; then, once a majority's contact
// reports are in, from the earliest moment they prove (contact.go; doc.go
// gives the safety argument). A session silent for longer than
// SilenceThreshold is checkpointed (KindCheckpoint) so that later leaders
// carry its silence over, and rule (R) holds back acknowledging it until a
// revive is applied (keepalive.go).
type duties struct {
	term     uint64
	active   bool // leader, and its first entry of the term is applied
	planted  bool // Knobs.FollowerExpiry's copy: expiries only
	sessions map[uint64]*sessionTimer
	leases   map[leaseKey][]*deadline // by (name, token): the holds granted with a lease in that entry
	delays   map[string]*deadline     // by lock name; token = the entry that started the delay
	queue    timerQueue               // the leases and delays, by when each next needs a look

	readyAt time.Time   // when this leader armed its timers
	ckSeq   uint64      // counter of this leader's checkpoint entries (their Seq)
	revive  []uint64    // sessions whose revive is to be proposed this turn
	early   []Keepalive // confirmed before ready: answered at ready
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

	name  string // the lock (leases and delays)
	delay bool   // a lock-delay's end, else a lease
	gen   uint32 // which of its entries in the timer queue is current
}

// leaseKey is where the leader files a hold's lease: its name and token.
// Most keys have one hold; readers or permits granted in one entry share one.
type leaseKey struct {
	name  string
	token uint64
}

func compareLeaseKeys(a, b leaseKey) int {
	return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.token, b.token))
}

// ckState is what the log says of a session, as far as this leader knows.
type ckState uint8

const (
	ckLive      ckState = iota // no silent mark in force: the log gives no bound
	ckInherited                // a silent mark from an earlier leader
	ckMine                     // a silent mark this leader proposed
)

func (s ckState) String() string {
	switch s {
	case ckLive:
		return "live"
	case ckInherited:
		return "inherited"
	}
	return "mine"
}

// sessionTimer is one session's deadline on the leader.
type sessionTimer struct {
	deadline           // at = base + ttl
	base     time.Time // no acknowledged keepalive was received after it (doc.go)
	ck       ckState
	ckBase   time.Time // ckMine: the base the latest mark states
	ckAt     time.Time // when the latest mark (silent or live) for it was proposed
	ckTag    uint64    // Seq of the entry carrying that mark
	parked   []Keepalive
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

func (l *duties) init() {
	l.sessions = map[uint64]*sessionTimer{}
	l.leases = map[leaseKey][]*deadline{}
	l.delays = map[string]*deadline{}
	l.queue = nil
	l.revive, l.early = nil, nil
	l.reports = reportState{}
}

// addLease starts the lease of one hold (it replaces an earlier deadline of
// the same hold: a new grant).
func (l *duties) addLease(name string, d *deadline) {
	d.name = name
	l.queue.schedule(d, d.at)
	k := leaseKey{name, d.token}
	for i, x := range l.leases[k] {
		if x.session == d.session && x.owner == d.owner {
			forget(x)
			l.leases[k][i] = d
			return
		}
	}
	l.leases[k] = append(l.leases[k], d)
}

// dropLease forgets the lease of one hold.
func (l *duties) dropLease(name string, token, session uint64, owner string) {
	k := leaseKey{name, token}
	ds := l.leases[k]
	for i, x := range ds {
		if x.session == session && x.owner == owner {
			forget(x)
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

// setDelay starts (or restarts) the lock-delay of name.
func (l *duties) setDelay(name string, d *deadline) {
	l.dropDelay(name)
	d.name, d.delay = name, true
	l.delays[name] = d
	l.queue.schedule(d, d.at)
}

// dropDelay forgets the lock-delay of name, if any.
func (l *duties) dropDelay(name string) {
	if d := l.delays[name]; d != nil {
		forget(d)
		delete(l.delays, name)
	}
}

// findLease finds the lease of the hold (name, token, session, owner); with
// session 0 (a renewal in the version-1 format, which names no holder), the
// only hold filed under (name, token).
func (l *duties) findLease(name string, token, session uint64, owner string) *deadline {
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

// arm arms every deadline from the lock table at now, and starts collecting
// contact reports unless a knob says otherwise; it reports whether it did.
func (l *duties) arm(e *Engine, now time.Time) (reports bool) {
	if l.active {
		return false
	}
	l.active = true
	l.readyAt = now
	k := e.cfg.Knobs
	inherited := 0
	for _, s := range e.host.Sessions() {
		if s.Ending {
			continue // already ending: the runs end it, nothing expires it again
		}
		ttl := time.Duration(s.TTLMillis) * time.Millisecond
		t := &sessionTimer{deadline: deadline{ttl: ttl}, base: now}
		if k.RestartDeadlinesOnFailover {
			t.at = now.Add(ttl) // planted: the old behaviour
			l.sessions[s.Session] = t
			continue
		}
		if b, ok := e.marks[s.Session]; ok && !s.Silent && k.ReviveAsSilenceZero {
			t.base, t.ck = b, ckInherited // planted: see Knobs.ReviveAsSilenceZero
		}
		if s.Silent {
			// The earliest a − σ over the silent marks this node applied
			// since the session's last revive (doc.go).
			b, ok := e.marks[s.Session]
			if !ok || b.After(now) {
				b = now.Add(-time.Duration(s.SilenceMillis) * time.Millisecond)
			}
			t.base, t.ck = b, ckInherited
			inherited++
			e.log.Debug("session base from its checkpoints", "session", s.Session, "silent_for", now.Sub(t.base))
		}
		t.at = t.base.Add(ttl)
		l.sessions[s.Session] = t
	}
	for _, li := range e.host.Locks() {
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
			if m, ok := e.delayed[li.Name]; ok && m.token == li.DelayToken && m.at.Before(now) {
				start = m.at
			}
			l.setDelay(li.Name, &deadline{at: start.Add(e.cfg.LockDelay), token: li.DelayToken})
		}
	}
	e.log.Info("leader ready: expiry timers armed", "term", l.term, "sessions", len(l.sessions),
		"checkpointed", inherited)
	if l.planted || k.RestartDeadlinesOnFailover {
		return false
	}
	return l.startReports(e, now)
}

// onEvent keeps the timers in step with the lock table.
func (l *duties) onEvent(ev *lockfsm.Event, now time.Time) {
	if !l.active {
		return
	}
	switch ev.Kind {
	case lockfsm.EventSessionOpened:
		ttl := time.Duration(ev.TTLMillis) * time.Millisecond
		l.sessions[ev.Session] = &sessionTimer{deadline: deadline{at: now.Add(ttl), ttl: ttl}, base: now}
	case lockfsm.EventSessionEnded, lockfsm.EventSessionEnding:
		if t := l.sessions[ev.Session]; t != nil {
			for _, k := range t.parked {
				k.Reply(NoSession)
			}
		}
		delete(l.sessions, ev.Session)
	case lockfsm.EventGranted:
		if ev.LeaseMillis > 0 {
			ttl := time.Duration(ev.LeaseMillis) * time.Millisecond
			l.addLease(ev.Name, &deadline{at: now.Add(ttl), ttl: ttl, token: ev.Token, session: ev.Session,
				owner: ev.Owner, shared: ev.Mode == lockfsm.ModeShared || ev.Permits > 0})
		}
		l.dropDelay(ev.Name)
		for _, x := range ev.ExtraNames {
			l.dropDelay(x)
		}
	case lockfsm.EventReleased:
		l.dropLease(ev.Name, ev.Token, ev.Session, ev.Owner)
	case lockfsm.EventDelayed:
		l.setDelay(ev.Name, &deadline{at: now.Add(time.Duration(ev.DelayMillis) * time.Millisecond), token: ev.Token})
	}
}

// tick returns the expiry of every deadline that has passed, at most once
// per RetryInterval each, in a fixed order (sessions by id, then leases by
// name and token, then delays by name), and the checkpoints and revives
// that are due.
func (l *duties) tick(e *Engine, now time.Time) []lockfsm.Command {
	if !l.active {
		return nil
	}
	due := func(d *deadline) bool {
		if now.Before(d.at) {
			return false
		}
		if !d.proposedAt.IsZero() && now.Sub(d.proposedAt) < e.cfg.RetryInterval {
			return false
		}
		d.proposedAt = now
		return true
	}
	var cmds []lockfsm.Command
	var ids []uint64
	for id, t := range l.sessions {
		if due(&t.deadline) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		t := l.sessions[id]
		e.log.Info("session expired; proposing expiry", "session", id, "ttl", t.ttl,
			"silent_for", now.Sub(t.base).Round(time.Millisecond))
		cmds = append(cmds, lockfsm.Command{
			Kind:            lockfsm.KindExpireSession,
			Session:         id,
			LockDelayMillis: uint64(e.cfg.LockDelay.Milliseconds()),
		})
	}
	// Leases and delays: those the queue says are due, then in the fixed
	// order (the holds of one key in grant order).
	var leases, delays []*deadline
	for _, d := range l.queue.popDue(now, nil) {
		if !due(d) {
			// Not yet (its time moved without a new entry): look again then.
			l.queue.schedule(d, later(d.at, d.proposedAt.Add(e.cfg.RetryInterval)))
			continue
		}
		l.queue.schedule(d, now.Add(e.cfg.RetryInterval)) // if the expiry is not applied by then
		if d.delay {
			delays = append(delays, d)
		} else {
			leases = append(leases, d)
		}
	}
	slices.SortFunc(leases, func(a, b *deadline) int {
		ka, kb := leaseKey{a.name, a.token}, leaseKey{b.name, b.token}
		if c := compareLeaseKeys(ka, kb); c != 0 {
			return c
		}
		ds := l.leases[ka]
		return cmp.Compare(slices.Index(ds, a), slices.Index(ds, b))
	})
	for _, d := range leases {
		c := lockfsm.Command{Kind: lockfsm.KindExpireLease, Name: d.name, Token: d.token}
		if d.shared {
			c.Session, c.Owner = d.session, d.owner
		}
		cmds = append(cmds, c)
	}
	slices.SortFunc(delays, func(a, b *deadline) int { return cmp.Compare(a.name, b.name) }) // one per name
	for _, d := range delays {
		cmds = append(cmds, lockfsm.Command{Kind: lockfsm.KindLiftDelay, Name: d.name, Token: d.token})
	}
	if !l.planted {
		cmds = append(cmds, l.checkpoint(e, now)...)
	}
	return cmds
}

// checkpoint returns one KindCheckpoint entry with the marks that are due:
// sessions silent past SilenceThreshold (from markGrace after ready on),
// inherited marks once this leader's reports are in (it may know an earlier
// base, and its marks are applied fresh on restarted replicas), its own
// marks every checkpointPeriod, and revives held back more than
// RetryInterval.
func (l *duties) checkpoint(e *Engine, now time.Time) []lockfsm.Command {
	r := &l.reports
	if r.wanted && now.Sub(r.started) >= 2*e.cfg.ElectionTimeout {
		if r.pending {
			e.log.Info("leader: no majority of contact reports; deadlines stay as armed", "term", l.term,
				"reporters", len(r.got))
		}
		r.wanted, r.pending = false, false
	}
	var cmds []lockfsm.Command
	var marks []lockfsm.Checkpoint
	tag := l.ckSeq + 1
	// KindCheckpoint is a version-2 command that builds before the catalogue
	// stop at (ErrNewerVersion): no marks while a member is known to run
	// such a build. Without marks a new leader has the contact reports
	// alone, and expiry only comes later.
	open := !e.host.OlderMemberKnown()
	for id, t := range l.sessions {
		if !open {
			break
		}
		if !t.proposedAt.IsZero() {
			continue // expiring
		}
		if len(t.parked) > 0 {
			if now.Sub(t.ckAt) >= e.cfg.RetryInterval {
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
			if r.pending || now.Sub(t.base) < e.cfg.SilenceThreshold() || now.Sub(l.readyAt) < e.cfg.markGrace() {
				continue
			}
		case ckInherited:
			if r.pending {
				continue
			}
		case ckMine:
			if now.Sub(t.ckAt) < e.cfg.checkpointPeriod() {
				continue
			}
		}
		silence := max(now.Sub(t.base), 0)
		marks = append(marks, lockfsm.Checkpoint{Session: id, SilenceMillis: uint64(silence / time.Millisecond)})
		t.ck, t.ckBase, t.ckAt, t.ckTag = ckMine, t.base, now, tag
	}
	if len(marks) > 0 {
		l.ckSeq = tag
		slices.SortFunc(marks, func(a, b lockfsm.Checkpoint) int { return cmp.Compare(a.Session, b.Session) })
		e.log.Debug("checkpointing silent sessions", "sessions", len(marks))
		cmds = append(cmds, lockfsm.Command{Kind: lockfsm.KindCheckpoint, Token: l.term, Seq: tag, Checkpoints: marks})
	}
	return append(cmds, l.flushRevives(now)...)
}

// sortedIDs is m's keys in increasing order.
func sortedIDs[V any](m map[uint64]V) []uint64 {
	return slices.Sorted(maps.Keys(m))
}
