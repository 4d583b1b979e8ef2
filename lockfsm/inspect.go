package lockfsm

import "slices"

// LockInfo describes one name in the lock table, for admin views and for a new leader re-arming lease
// timers. Holder is zero when the name is free (it then exists only while delayed).
type LockInfo struct {
	Name        string
	Holder      Holder
	HoldCount   uint32
	Token       uint64
	GrantSeq    uint64 // Seq of the acquire that created the current hold; 0 once that acquire is cancelled
	LeaseMillis uint64
	Delayed     bool
	DelayToken  uint64
	Waiters     []WaiterInfo // queue order: Waiters[0] is next
}

// WaiterInfo describes one queued acquire.
type WaiterInfo struct {
	Session     uint64
	Owner       string
	Seq         uint64
	Enqueued    uint64 // index of the acquire entry that queued it
	LeaseMillis uint64
}

// SessionInfo describes one open session.
type SessionInfo struct {
	Session   uint64
	Node      uint64
	TTLMillis uint64
	Holds     int // names it holds
	Waits     int // queued acquires it has
	Retained  int // results kept for deduplication
	// Silent: the session's latest checkpoint (KindCheckpoint) says it had been silent SilenceMillis when
	// the entry was proposed; false once a later checkpoint marked it live (and for a new session).
	Silent        bool
	SilenceMillis uint64
}

// Lock returns the state of one name; false if nobody holds, waits for or delays it.
func (f *FSM) Lock(name string) (LockInfo, bool) {
	l := f.locks[name]
	if l == nil {
		return LockInfo{}, false
	}
	return l.info(), true
}

// Locks returns every name in the table, sorted by name. The result is a copy.
func (f *FSM) Locks() []LockInfo {
	out := make([]LockInfo, 0, len(f.locks))
	for _, name := range sortedKeys(nil, f.locks) {
		out = append(out, f.locks[name].info())
	}
	return out
}

func (l *lock) info() LockInfo {
	li := LockInfo{Name: l.name, Holder: l.holder, HoldCount: l.holdCount, Token: l.token, GrantSeq: l.grantSeq,
		LeaseMillis: l.lease, Delayed: l.delayed, DelayToken: l.delayToken}
	for _, w := range l.waiters {
		li.Waiters = append(li.Waiters, WaiterInfo{Session: w.session, Owner: w.owner, Seq: w.seq,
			Enqueued: w.enqueued, LeaseMillis: w.lease})
	}
	return li
}

// HasSession reports whether session id is open.
func (f *FSM) HasSession(id uint64) bool { return f.sessions[id] != nil }

// Sessions returns every open session, sorted by id.
func (f *FSM) Sessions() []SessionInfo {
	out := make([]SessionInfo, 0, len(f.sessions))
	for _, s := range f.sessions {
		n := 0
		for _, c := range s.waits {
			n += int(c)
		}
		mark := checkpointFromCode(s.id, s.ckpt)
		out = append(out, SessionInfo{Session: s.id, Node: s.node, TTLMillis: s.ttl, Holds: len(s.holds),
			Waits: n, Retained: len(s.results), Silent: !mark.Live, SilenceMillis: mark.SilenceMillis})
	}
	slices.SortFunc(out, func(a, b SessionInfo) int {
		switch {
		case a.Session < b.Session:
			return -1
		case a.Session > b.Session:
			return 1
		}
		return 0
	})
	return out
}
