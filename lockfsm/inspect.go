package lockfsm

import (
	"cmp"
	"slices"
)

// LockInfo describes one name in the lock table, for admin views and for a new leader re-arming lease
// timers. A name exists while it has a hold, a waiter or a lock-delay.
type LockInfo struct {
	Name      string
	Primitive Primitive
	// Holds in grant order: the holder of a mutex or election, a read-write lock's writer and readers, a
	// semaphore's acquisitions. A multi-name hold appears on each of its names, with Names.
	Holds []HoldInfo
	// The first hold, as before the catalogue (zero when nobody holds the name).
	Holder      Holder
	HoldCount   uint32
	Token       uint64
	GrantSeq    uint64 // Seq of the acquire that created the first hold; 0 once that acquire is cancelled
	LeaseMillis uint64
	// Semaphore: its number of permits (Limit) and how many are held.
	Permits, PermitsInUse uint32
	// Election: the leader's value.
	Value      string
	Delayed    bool
	DelayToken uint64
	Waiters    []WaiterInfo // queue order: Waiters[0] is next
}

// HoldInfo describes one hold.
type HoldInfo struct {
	Session     uint64
	Owner       string
	Mode        Mode   // ModeShared: a reader
	HoldCount   uint32 // reentrant levels
	Permits     uint32 // semaphore: permits it takes
	Token       uint64
	GrantSeq    uint64
	LeaseMillis uint64
	Names       []string // a multi-name hold: all its names (do not modify)
}

// WaiterInfo describes one queued acquire.
type WaiterInfo struct {
	Position    uint32 // 1 = next in line
	Session     uint64
	Owner       string
	Seq         uint64
	Enqueued    uint64 // index of the acquire entry that queued it
	LeaseMillis uint64
	Mode        Mode
	Permits     uint32
	Value       string   // election: the value it campaigns with
	Names       []string // a multi-name acquire: all its names (do not modify)
}

// LeaderInfo is an election's current leader.
type LeaderInfo struct {
	Holder Holder
	Token  uint64 // its term: strictly increasing over the election's leaders
	Value  string
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
	// Ending: the session ends over several entries (ending.go); Holds and Waits are what is left.
	Ending bool
}

// Lock returns the state of one name; false if nobody holds, waits for or delays it.
func (f *FSM) Lock(name string) (LockInfo, bool) {
	l := f.locks.get(name)
	if l == nil {
		return LockInfo{}, false
	}
	return l.info(), true
}

// Locks returns every name in the table, sorted by name. The result is a copy.
func (f *FSM) Locks() []LockInfo {
	out := make([]LockInfo, 0, f.locks.len())
	for _, name := range f.locks.sortedNames(nil) {
		out = append(out, f.locks.get(name).info())
	}
	return out
}

// Leader returns the current leader of the election name; false when nobody leads it (or it is not an
// election).
func (f *FSM) Leader(name string) (LeaderInfo, bool) {
	l := f.locks.get(name)
	if l == nil || l.prim != PrimElection || !l.held() {
		return LeaderInfo{}, false
	}
	h := &l.holds()[0]
	return LeaderInfo{Holder: Holder{Session: h.session, Owner: h.owner}, Token: h.token, Value: l.value()}, true
}

func (l *lock) info() LockInfo {
	li := LockInfo{Name: l.name, Primitive: l.prim, Permits: l.limit(), PermitsInUse: l.used(), Value: l.value(),
		Delayed: l.delayed, DelayToken: l.delayToken()}
	for i := range l.holds() {
		h := &l.holds()[i]
		li.Holds = append(li.Holds, HoldInfo{Session: h.session, Owner: h.owner, Mode: h.mode(), HoldCount: h.count,
			Permits: h.permits(), Token: h.token, GrantSeq: h.grantSeq, LeaseMillis: h.lease, Names: h.names()})
	}
	if len(l.holds()) > 0 {
		h := &l.holds()[0]
		li.Holder = Holder{Session: h.session, Owner: h.owner}
		li.HoldCount, li.Token, li.GrantSeq, li.LeaseMillis = h.count, h.token, h.grantSeq, h.lease
	}
	for i := range l.waiters() {
		w := &l.waiters()[i]
		li.Waiters = append(li.Waiters, WaiterInfo{Position: uint32(i + 1), Session: w.session, Owner: w.owner,
			Seq: w.seq, Enqueued: w.enqueued, LeaseMillis: w.lease, Mode: w.mode, Permits: w.permits,
			Value: w.value(), Names: w.names()})
	}
	return li
}

// Session returns one open session; false if it is not open.
func (f *FSM) Session(id uint64) (SessionInfo, bool) {
	s := f.sessions[id]
	if s == nil {
		return SessionInfo{}, false
	}
	return s.info(), true
}

// SessionsOf counts the open sessions of member node (read-only; a scan of
// the open sessions).
func (f *FSM) SessionsOf(node uint64) int {
	n := 0
	for _, s := range f.sessions {
		if s.node == node {
			n++
		}
	}
	return n
}

// HasSession reports whether session id is open.
func (f *FSM) HasSession(id uint64) bool { return f.sessions[id] != nil }

// Sessions returns every open session, sorted by id.
func (f *FSM) Sessions() []SessionInfo {
	out := make([]SessionInfo, 0, len(f.sessions))
	for _, s := range f.sessions {
		out = append(out, s.info())
	}
	slices.SortFunc(out, func(a, b SessionInfo) int { return cmp.Compare(a.Session, b.Session) })
	return out
}

func (s *session) info() SessionInfo {
	mark := checkpointFromCode(s.id, s.ckpt)
	return SessionInfo{Session: s.id, Node: s.node, TTLMillis: s.ttl, Holds: s.holds.len(), Waits: s.waiting,
		Retained: len(s.results), Silent: !mark.Live, SilenceMillis: mark.SilenceMillis, Ending: s.ending != nil}
}
