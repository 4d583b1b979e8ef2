package node

import (
	"time"

	"github.com/lockraft/lockraft/lockfsm"
)

// leaderDuties are the leader's expiry timers: session deadlines, per-lock
// lease deadlines and lock-delay ends. They live only on the leader, on its
// monotonic clock; followers never expire anything. When a deadline passes
// the leader proposes an entry (ExpireSession, ExpireLease, LiftDelay) and
// lockfsm applies it identically everywhere (S7).
//
// A new leader starts every deadline afresh from the moment its first entry
// of its term is applied (ready), so a failover only ever makes expiry later,
// never earlier (as etcd's lessor Promote does).
type leaderDuties struct {
	term            uint64
	active          bool // leader, and its first entry of the term is applied
	sessions        map[uint64]*deadline
	leases          map[string]*deadline // by lock name; token = the grant it targets
	delays          map[string]*deadline // by lock name; token = the entry that started the delay
	stepDownWaiters []chan struct{}
}

type deadline struct {
	at         time.Time
	ttl        time.Duration
	token      uint64
	proposedAt time.Time // last time the expiry was proposed
}

func (l *leaderDuties) init() {
	l.sessions = map[uint64]*deadline{}
	l.leases = map[string]*deadline{}
	l.delays = map[string]*deadline{}
}

func (l *leaderDuties) becomeLeader(term uint64) {
	l.term = term
	l.active = false
	l.init()
}

// ready arms every deadline from now: called when the empty entry of this
// leader's term is applied, i.e. the lock table is complete.
func (l *leaderDuties) ready(n *Node) {
	if l.active {
		return
	}
	l.active = true
	now := n.clock.Now()
	for _, s := range n.fsm.Sessions() {
		ttl := time.Duration(s.TTLMillis) * time.Millisecond
		l.sessions[s.Session] = &deadline{at: now.Add(ttl), ttl: ttl}
	}
	for _, li := range n.fsm.Locks() {
		if li.HoldCount > 0 && li.LeaseMillis > 0 {
			ttl := time.Duration(li.LeaseMillis) * time.Millisecond
			l.leases[li.Name] = &deadline{at: now.Add(ttl), ttl: ttl, token: li.Token}
		}
		if li.Delayed {
			l.delays[li.Name] = &deadline{at: now.Add(n.cfg.LockDelay), token: li.DelayToken}
		}
	}
	n.log.Info("leader ready: expiry timers armed", "term", l.term, "sessions", len(l.sessions))
}

// stepDown is called when this node stops leading: its timers are dropped
// (the next leader arms its own).
func (l *leaderDuties) stepDown() {
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
		l.sessions[ev.Session] = &deadline{at: now.Add(ttl), ttl: ttl}
	case lockfsm.EventSessionEnded:
		delete(l.sessions, ev.Session)
	case lockfsm.EventGranted:
		if ev.LeaseMillis > 0 {
			ttl := time.Duration(ev.LeaseMillis) * time.Millisecond
			l.leases[ev.Name] = &deadline{at: now.Add(ttl), ttl: ttl, token: ev.Token}
		}
		delete(l.delays, ev.Name)
	case lockfsm.EventReleased:
		if d := l.leases[ev.Name]; d != nil && d.token == ev.Token {
			delete(l.leases, ev.Name)
		}
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
	}
}

// tick proposes the expiry of every deadline that has passed, at most once
// per RetryInterval each (the entries are idempotent: a stale one is a no-op).
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
	for id, d := range l.sessions {
		if due(d) {
			n.log.Info("session expired; proposing expiry", "session", id, "ttl", d.ttl)
			n.proposeSessionless(lockfsm.Command{
				Kind:            lockfsm.KindExpireSession,
				Session:         id,
				LockDelayMillis: uint64(n.cfg.LockDelay.Milliseconds()),
			})
		}
	}
	for name, d := range l.leases {
		if due(d) {
			n.proposeSessionless(lockfsm.Command{Kind: lockfsm.KindExpireLease, Name: name, Token: d.token})
		}
	}
	for name, d := range l.delays {
		if due(d) {
			n.proposeSessionless(lockfsm.Command{Kind: lockfsm.KindLiftDelay, Name: name, Token: d.token})
		}
	}
}

// retry is part of the per-tick retry pass; expiries retry in tick.
func (l *leaderDuties) retry(*Node, time.Time) {}

// keepalive serves one session keepalive on the leader.
func (l *leaderDuties) keepalive(n *Node, sess uint64, now time.Time) keepaliveStatus {
	if !n.loop.isLeader {
		return keepaliveNotLeader
	}
	if !l.active {
		// Not ready yet: every deadline will start from the ready moment,
		// which is later than now, so acknowledging is safe if the session
		// exists.
		for _, s := range n.fsm.Sessions() {
			if s.Session == sess {
				return keepaliveOK
			}
		}
		return keepaliveNoSession
	}
	d := l.sessions[sess]
	if d == nil || !d.proposedAt.IsZero() {
		// Unknown, or its expiry is already proposed: acknowledging now
		// would let the holder believe in a session that is ending.
		return keepaliveNoSession
	}
	if at := now.Add(d.ttl); at.After(d.at) {
		d.at = at
	}
	return keepaliveOK
}

// renewLease restarts a lock's own lease on the leader, if the token still
// holds it.
func (l *leaderDuties) renewLease(n *Node, name string, token uint64, now time.Time) keepaliveStatus {
	if !n.loop.isLeader || !l.active {
		return keepaliveNotLeader
	}
	d := l.leases[name]
	if d == nil || d.token != token || !d.proposedAt.IsZero() {
		return keepaliveNoSession
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
		n.loop.local.ready(n)
	}
	delete(n.loop.local.sessions, n.loop.own.id)
	n.loop.local.tick(n, n.clock.Now())
}
