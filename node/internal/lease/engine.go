package lease

import (
	"log/slog"
	"strconv"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/lockfsm"
)

// Status is the engine's answer to a keepalive or a lease renewal.
type Status byte

const (
	OK        Status = iota + 1 // acknowledged: the holder counts its deadline from its send time
	NotLeader                   // this node does not lead, or stopped leading before it could answer
	NoSession                   // the session or hold is unknown here, or its expiry is already proposed
)

func (s Status) String() string {
	switch s {
	case OK:
		return "OK"
	case NotLeader:
		return "NotLeader"
	case NoSession:
		return "NoSession"
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// Knobs are the planted lease bugs, each breaking one promise (copied from
// the node's testing knobs). The zero value is the production behaviour.
type Knobs struct {
	// FollowerExpiry makes a follower expire other members' sessions on its
	// own clock, with deadlines no keepalive moves (S5). The node calls
	// FollowerExpiry on its fine ticker while it does not lead.
	FollowerExpiry bool
	// RestartDeadlinesOnFailover restarts every session deadline from a new
	// leader's first entry, ignoring marks and reports, as etcd and Consul
	// do (L3 under leader churn).
	RestartDeadlinesOnFailover bool
	// ReviveAsSilenceZero reads a revive as "silent 0 ms at its apply time"
	// instead of "no bound in the log" (S5).
	ReviveAsSilenceZero bool
	// AckWhileMarked breaks rule (R): the leader acknowledges keepalives of
	// a session it marked silent without a revive first (S5).
	AckWhileMarked bool
}

// Config is what the engine needs of the node's configuration.
type Config struct {
	// Self is this node's raft id (its own contact report counts as a
	// voter's).
	Self uint64
	// KeepaliveInterval is how often holders send keepalives.
	KeepaliveInterval time.Duration
	// RetryInterval spaces re-proposals of the same expiry, lift or revive.
	RetryInterval time.Duration
	// ElectionTimeout is raft's base election timeout.
	ElectionTimeout time.Duration
	// TickInterval is one raft tick.
	TickInterval time.Duration
	// LockDelay is how long names freed by a session expiry stay delayed.
	LockDelay time.Duration
	// DriftRatio bounds how far two nodes' clock rates may differ.
	DriftRatio float64
	// Logger receives the engine's records; nil discards them.
	Logger *slog.Logger
	// Knobs plants lease bugs (tests only).
	Knobs Knobs
}

// SilenceThreshold: a session not heard from for this long is checkpointed
// (two keepalive intervals: a healthy one never is).
func (c Config) SilenceThreshold() time.Duration { return 2 * c.KeepaliveInterval }

// markGrace: after taking over, a leader waits this long before it marks
// sessions it has not heard from (live ones need a round trip and a
// confirmation round to reach it).
func (c Config) markGrace() time.Duration {
	return min(c.SilenceThreshold(), max(c.KeepaliveInterval/2, 3*c.TickInterval))
}

// checkpointPeriod: a silent session's mark is proposed again this often, so
// that replicas that restarted meanwhile apply a fresh one.
func (c Config) checkpointPeriod() time.Duration {
	return max(c.RetryInterval, c.ElectionTimeout/2)
}

// Host is what the engine reads of its node.
type Host interface {
	// Sessions and Locks are the applied lock table (lockfsm.FSM's, sorted
	// by id and by name); HasSession whether a session is open in it.
	Sessions() []lockfsm.SessionInfo
	Locks() []lockfsm.LockInfo
	HasSession(id uint64) bool
	// OlderMemberKnown reports whether a member of the configuration is
	// known to run a build before checkpoints and heartbeat extensions (the
	// version gate): while one is, the engine proposes no marks and extends
	// no heartbeats.
	OlderMemberKnown() bool
}

// Keepalive is one session keepalive whose confirmation round a quorum has
// answered, for the leader to acknowledge.
type Keepalive struct {
	Session uint64
	// Recv is when it arrived on this node: after the holder sent it, and
	// before the confirmation round issued for it.
	Recv time.Time
	// Reply receives the answer. The engine calls it exactly once, from
	// within one of its methods (possibly a later call than Keepalive: rule
	// R holds it back until a revive applies). It must not block nor call
	// back into the engine.
	Reply func(Status)
}

// Engine is one node's lease engine. The zero value is not usable: New.
// Its methods must be called from one goroutine (the node's loop).
type Engine struct {
	cfg  Config
	host Host
	log  *slog.Logger

	leader    bool              // between BecomeLeader and StepDown
	electedIn *raftpb.ConfState // the configuration in force when this node last became leader
	lead      duties
	local     duties // Knobs.FollowerExpiry only

	// Node memory, kept on every node for when it leads (doc.go): seen, when
	// this node last heard from leaders and saw each session in a
	// confirmation round; marks, per silent session, the earliest base
	// (apply time − silence) of its checkpoints since its last revive;
	// opened, when it applied each session's OpenSession (or loaded it);
	// delayed, when it applied the expiry that started each lock-delay.
	seen    contactLog
	marks   map[uint64]time.Time
	opened  map[uint64]time.Time
	delayed map[string]delayMark
}

// delayMark is when this node applied the expiry that started a lock-delay
// (token: that entry's index).
type delayMark struct {
	token uint64
	at    time.Time
}

// New returns the engine of a node that starts at now with the lock table
// host holds (LoadTable).
func New(cfg Config, host Host, now time.Time) *Engine {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{cfg: cfg, host: host, log: log}
	e.lead.init()
	e.local.init()
	e.seen.init(now)
	e.delayed = map[string]delayMark{}
	e.LoadTable(now)
	return e
}

// LoadTable dates the silent marks of a lock table just loaded (at start,
// or restored from a snapshot): this node applied the latest one no later
// than now, which is all it can say (a later a is conservative).
func (e *Engine) LoadTable(now time.Time) {
	e.marks = map[uint64]time.Time{}
	e.opened = map[uint64]time.Time{}
	for _, s := range e.host.Sessions() {
		e.opened[s.Session] = now
		if s.Silent {
			e.marks[s.Session] = now.Add(-time.Duration(s.SilenceMillis) * time.Millisecond)
		}
	}
}

// BecomeLeader is called when this node becomes leader of term, elected in
// configuration electedIn. Nothing is armed before Ready.
func (e *Engine) BecomeLeader(term uint64, electedIn *raftpb.ConfState) {
	e.leader = true
	e.electedIn = electedIn
	e.lead.term = term
	e.lead.active = false
	e.lead.init()
}

// Ready arms every deadline: the leader calls it when the empty entry of its
// term is applied, i.e. the lock table is complete. It answers the
// keepalives confirmed before, and returns the commands to propose. With
// reportRound it has started collecting contact reports: the node issues a
// flagged confirmation round at once.
func (e *Engine) Ready(now time.Time) (cmds []lockfsm.Command, reportRound bool) {
	l := &e.lead
	if !e.leader || l.active {
		return nil, false
	}
	reportRound = l.arm(e, now)
	early := l.early
	l.early = nil
	for _, k := range early {
		l.keepalive(e, k)
	}
	return l.flushRevives(now), reportRound
}

// StepDown is called when this node stops leading: its timers are dropped
// (the next leader arms its own) and held-back keepalives are answered
// NotLeader.
func (e *Engine) StepDown() {
	l := &e.lead
	for _, id := range sortedIDs(l.sessions) {
		for _, k := range l.sessions[id].parked {
			k.Reply(NotLeader)
		}
	}
	for _, k := range l.early {
		k.Reply(NotLeader)
	}
	e.leader = false
	l.active = false
	l.init()
}

// Active reports whether this node leads and has armed its deadlines (its
// term's first entry is applied: its lock table is complete).
func (e *Engine) Active() bool { return e.leader && e.lead.active }

// Term is the term this node last became leader in.
func (e *Engine) Term() uint64 { return e.lead.term }

// OnEvent keeps the node memory and the leader's timers in step with the
// lock table: every event lockfsm emits, at the time it is applied.
func (e *Engine) OnEvent(ev *lockfsm.Event, now time.Time) {
	e.noteEvent(ev, now)
	e.lead.onEvent(ev, now)
	if e.cfg.Knobs.FollowerExpiry {
		e.local.onEvent(ev, now)
	}
}

// noteEvent keeps this node's memory of sessions and delays in step with
// the lock table (every node: any of them may lead next).
func (e *Engine) noteEvent(ev *lockfsm.Event, now time.Time) {
	switch ev.Kind {
	case lockfsm.EventSessionOpened:
		e.opened[ev.Session] = now
	case lockfsm.EventSessionEnded:
		delete(e.marks, ev.Session)
		delete(e.opened, ev.Session)
		e.seen.forget(ev.Session)
	case lockfsm.EventDelayed:
		e.delayed[ev.Name] = delayMark{token: ev.Token, at: now}
	case lockfsm.EventGranted:
		delete(e.delayed, ev.Name)
	}
}

// OnLiftDelay is called for every applied KindLiftDelay: a lift that found
// nobody to grant to produces no Granted event.
func (e *Engine) OnLiftDelay(cmd *lockfsm.Command) {
	if d := e.lead.delays[cmd.Name]; d != nil && d.token == cmd.Token {
		e.lead.dropDelay(cmd.Name)
	}
	if m, ok := e.delayed[cmd.Name]; ok && m.token == cmd.Token {
		delete(e.delayed, cmd.Name)
	}
}

// OnCheckpoint is called for every applied KindCheckpoint, at its apply
// time now: for each silent mark it keeps the earliest base a − σ of the
// session's marks since its last revive (node memory), and on the leader
// that proposed it, a revive that is the latest mark of its session
// releases the keepalives held back for it (rule R).
func (e *Engine) OnCheckpoint(cmd *lockfsm.Command, now time.Time) {
	l := &e.lead
	mine := l.active && e.leader && cmd.Token == l.term
	for _, m := range cmd.Checkpoints {
		if m.Live && e.cfg.Knobs.ReviveAsSilenceZero && e.host.HasSession(m.Session) {
			e.marks[m.Session] = now // planted: the revive as a mark of 0 ms
		} else if m.Live {
			delete(e.marks, m.Session)
		} else if e.host.HasSession(m.Session) {
			b := now.Add(-time.Duration(m.SilenceMillis) * time.Millisecond)
			if old, ok := e.marks[m.Session]; !ok || b.Before(old) {
				e.marks[m.Session] = b
			}
		}
		t := l.sessions[m.Session]
		if !mine || t == nil || t.ckTag != cmd.Seq || !m.Live {
			continue
		}
		t.ck = ckLive
		for _, k := range t.parked {
			e.log.Debug("keepalive acknowledged after revive", "session", m.Session, "recv_ago", now.Sub(k.Recv))
			k.Reply(OK)
		}
		t.parked = nil
	}
}

// Tick returns the commands that are due on the leader at now: the expiry
// of every deadline that has passed, at most once per RetryInterval each
// (the entries are idempotent: a stale one is a no-op), and the checkpoints
// and revives that are due.
func (e *Engine) Tick(now time.Time) []lockfsm.Command {
	return e.lead.tick(e, now)
}

// FollowerExpiry is the planted bug Knobs.FollowerExpiry, called on a
// follower's fine tick: it expires other nodes' sessions on this node's
// clock, with deadlines that no keepalive ever moves (keepalives reach only
// the leader). Its own session (own) it trusts, as its keepalives are
// acknowledged. Without the knob it returns nothing.
func (e *Engine) FollowerExpiry(now time.Time, own uint64) []lockfsm.Command {
	l := &e.local
	if !e.cfg.Knobs.FollowerExpiry {
		return nil
	}
	if !l.active {
		l.planted = true
		l.arm(e, now)
	}
	delete(l.sessions, own)
	return l.tick(e, now)
}

// DeadlineBefore reports whether the leader has a deadline before t (the
// node runs its fine ticker while one is near).
func (e *Engine) DeadlineBefore(t time.Time) bool {
	l := &e.lead
	if !l.active {
		return false
	}
	for _, d := range l.sessions {
		if d.at.Before(t) {
			return true
		}
	}
	next, ok := l.queue.next() // leases and delays
	return ok && next.at.Before(t)
}

// SessionDeadline is when the leader will expire session id; false if this
// node is not an active leader or does not track it.
func (e *Engine) SessionDeadline(id uint64) (time.Time, bool) {
	if !e.Active() {
		return time.Time{}, false
	}
	t := e.lead.sessions[id]
	if t == nil {
		return time.Time{}, false
	}
	return t.at, true
}

// LeaseDeadline is when the leader will expire the lease of the hold (name,
// token, session, owner), name being the name it was granted under (a
// multi-name hold's first); false if this node is not an active leader or
// the hold has no lease here.
func (e *Engine) LeaseDeadline(name string, token, session uint64, owner string) (time.Time, bool) {
	if !e.Active() {
		return time.Time{}, false
	}
	d := e.lead.findLease(name, token, session, owner)
	if d == nil {
		return time.Time{}, false
	}
	return d.at, true
}
