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
	leases          map[leaseKey][]*deadline // by (name, token): the holds granted with a lease in that entry
	delays          map[string]*deadline     // by lock name; token = the entry that started the delay
	stepDownWaiters []chan struct{}
}

type deadline struct {
	at         time.Time
	ttl        time.Duration
	token      uint64
	proposedAt time.Time // last time the expiry was proposed
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

func (l *leaderDuties) init() {
	l.sessions = map[uint64]*deadline{}
	l.leases = map[leaseKey][]*deadline{}
	l.delays = map[string]*deadline{}
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
		for _, h := range li.Holds {
			if h.LeaseMillis == 0 || (len(h.Names) > 0 && h.Names[0] != li.Name) {
				continue // no lease, or a multi-name hold filed under its first name
			}
			ttl := time.Duration(h.LeaseMillis) * time.Millisecond
			l.addLease(li.Name, &deadline{at: now.Add(ttl), ttl: ttl, token: h.Token, session: h.Session,
				owner: h.Owner, shared: h.Mode == lockfsm.ModeShared || h.Permits > 0})
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
