package lockfsm

import "strings"

// Multi-name acquires: Name and ExtraNames, all mutexes, taken together in one entry or not at all.
//
// A request holds nothing while it waits (no hold-and-wait): it sits in the FIFO queue of every one of its
// names, entered in its one entry, and is granted in the first apply where it is first in every one of
// those queues and each of those names is free and not delayed. While it is first in a queue it blocks
// the requests behind it on that name even when the name is free (no overtaking, single-name or not).
//
// No deadlock, and every waiter is granted once the holds in its way end: every queue is in the order of
// the entries that enqueued its waiters (appends happen in log order and removals keep the order), so
// the waiting request with the lowest enqueue index is first in every one of its queues. It waits only
// for holds, never for another waiter; no new hold can be granted on its names meanwhile (a new acquire
// queues behind it); holds end by release, lease, cancel or session expiry; and the apply that frees its
// last name grants it. By induction on the enqueue index, every waiter is granted. What no state machine
// can prevent is an owner that holds one name and waits for another, singly, against another owner doing
// the opposite; taking both names in one multi-name acquire is exactly how to avoid that.

func nameAt(c *Command, i int) string {
	if i == 0 {
		return c.Name
	}
	return c.ExtraNames[i-1]
}

// sameSet says whether names holds exactly c's names (in any order).
func sameSet(names []string, c *Command) bool {
	n := 1 + len(c.ExtraNames)
	if len(names) != n {
		return false
	}
	for i := 0; i < n; i++ {
		found := false
		for _, x := range names {
			if x == nameAt(c, i) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// acquireMulti applies a multi-name mutex acquire.
func (f *FSM) acquireMulti(index uint64, s *session, c *Command, ev []Event) (Result, []Event) {
	n := 1 + len(c.ExtraNames)
	if n > MaxMultiNames {
		return Result{Err: ErrTooManyNames}, ev
	}
	for _, x := range c.ExtraNames {
		if !validName(x) {
			return Result{Err: ErrInvalidName}, ev
		}
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			if nameAt(c, i) == nameAt(c, j) {
				return Result{Err: ErrDuplicateName}, ev
			}
		}
	}
	reenter := false
	for i := 0; i < n; i++ {
		l := f.locks.get(nameAt(c, i))
		if l == nil {
			continue
		}
		if l.prim != PrimMutex {
			return Result{Err: ErrWrongKind}, ev
		}
		if len(l.holds()) == 1 && l.holds()[0].session == s.id && l.holds()[0].owner == c.Owner {
			if !sameSet(l.holds()[0].names(), c) {
				return Result{Err: ErrHoldConflict}, ev
			}
			reenter = true
		}
	}
	if reenter {
		return f.reenter(f.locks.get(c.Name), 0, c), ev
	}
	free := true
	var holder Holder
	for i := 0; i < n; i++ {
		if l := f.locks.get(nameAt(c, i)); l != nil && (l.delayed || l.held() || len(l.waiters()) != 0) {
			if free {
				holder = l.blocker(ModeExclusive)
			}
			free = false
		}
	}
	if free {
		ev = f.grantMulti(s, f.ownOwner(c.Owner), f.ownNames(c), c.Seq, index, c.LeaseMillis, false, ev)
		return Result{Status: Granted, Token: index, HoldCount: 1}, ev
	}
	if !c.Wait {
		return Result{Err: ErrLocked, Holder: holder}, ev
	}
	for i := 0; i < n; i++ {
		if l := f.locks.get(nameAt(c, i)); l != nil {
			if pos := l.waiting(s.id, c.Owner); pos != 0 {
				return Result{Err: ErrAlreadyWaiting, Position: pos}, ev
			}
		}
	}
	x := f.ownNames(c)
	w := waiter{session: s.id, owner: f.ownOwner(c.Owner), seq: c.Seq, enqueued: index, lease: c.LeaseMillis, x: x}
	names := x.names
	for _, name := range names {
		l := f.locks.get(name)
		if l == nil {
			l = f.newLock(name, PrimMutex, 0)
		}
		l.setWaiters(append(l.waiters(), w))
		s.addWait(name)
		f.touchLock(l)
	}
	return Result{Status: Queued, Position: uint32(len(f.locks.get(names[0]).waiters()))}, ev
}

// ownNames returns c's names, as strings the state may keep, in a new extra: the table's own for names it
// has, and for the others copies made in one allocation. A copy that outlives the others (a name whose
// entry stays, with waiters, after the multi-name hold that made it ends) keeps their bytes too: at most
// MaxMultiNames × MaxNameLen (16 KiB).
func (f *FSM) ownNames(c *Command) *extra {
	n := 1 + len(c.ExtraNames)
	x := newExtraNames(n)
	var b strings.Builder
	var copied uint32 // bit i: names[i] is in b (n ≤ MaxMultiNames = 32, checked by acquireMulti)
	for i := range n {
		name := nameAt(c, i)
		switch l := f.locks.get(name); {
		case l != nil:
			x.names[i] = l.name
		case f.k.keepAliases:
			x.names[i] = name
		default:
			if copied == 0 {
				b.Grow(namesLen(c, i)) // room for this name and the rest: most names of a LockAll are new
			}
			b.WriteString(name)
			copied |= 1 << i
		}
	}
	if copied == 0 {
		return x
	}
	copies, at := b.String(), 0
	for i := range n {
		if copied&(1<<i) != 0 {
			end := at + len(nameAt(c, i))
			x.names[i], at = copies[at:end], end
		}
	}
	return x
}

// namesLen is the length of c's names from the i-th on.
func namesLen(c *Command, i int) int {
	size := 0
	for ; i < 1+len(c.ExtraNames); i++ {
		size += len(nameAt(c, i))
	}
	return size
}

// newExtraNames returns an extra with room for n names, made with it in one allocation for a LockAll of
// a few names.
func newExtraNames(n int) *extra {
	if n <= inlineNames {
		e := &extraWithNames{}
		e.x.names = e.room[:n]
		return &e.x
	}
	return &extra{names: make([]string, n)}
}

// extraWithNames is an extra and the room for its names.
type extraWithNames struct {
	x    extra
	room [inlineNames]string
}

// inlineNames is how many names an extra made by newExtraNames holds in its own allocation.
const inlineNames = 4

// grantMulti gives (s, owner) one hold on every name of x (a copy per name, one token) and reports it
// once.
func (f *FSM) grantMulti(s *session, owner string, x *extra, seq, index, lease uint64, fromQueue bool,
	ev []Event) []Event {
	names := x.names
	h := hold{session: s.id, owner: owner, token: index, grantSeq: seq, lease: lease, count: 1, x: x}
	for i, n := range names {
		if f.k.partialMulti && i > 0 {
			continue
		}
		l := f.locks.get(n)
		if l == nil {
			l = f.newLock(n, PrimMutex, 0)
		}
		l.addHold(h)
		s.addHold(l)
		f.touchLock(l)
	}
	return append(ev, Event{Kind: EventGranted, Name: names[0], ExtraNames: names[1:], Session: s.id,
		Owner: owner, Seq: seq, Token: index, LeaseMillis: lease, FromQueue: fromQueue})
}

// multiReady says whether the multi-name waiter w is first in every one of its queues and each of its
// names is free and not delayed.
func multiReady(locks *lockTable, w *waiter) bool {
	for _, n := range w.names() {
		l := locks.get(n)
		if l == nil || l.delayed || l.held() || len(l.waiters()) == 0 {
			return false
		}
		if h := &l.waiters()[0]; h.session != w.session || h.seq != w.seq {
			return false
		}
	}
	return true
}

// grantMultiFromQueue grants the ready multi-name waiter w: it leaves the head of each of its queues.
func (f *FSM) grantMultiFromQueue(w waiter, index uint64, ev []Event) []Event {
	s := f.sessions[w.session]
	for _, n := range w.x.names {
		f.locks.get(n).removeWaiter(0)
		s.dropWait(n)
	}
	f.markGranted(s, w.seq, index)
	return f.grantMulti(s, w.owner, w.x, w.seq, index, w.lease, true, ev)
}

// dropMultiWaiter takes the multi-name waiter w out of every one of its queues (the caller settles them).
func (f *FSM) dropMultiWaiter(w *waiter) {
	s := f.sessions[w.session]
	for _, n := range w.x.names {
		l := f.locks.get(n)
		if l == nil {
			continue
		}
		for j := range l.waiters() {
			if v := &l.waiters()[j]; v.session == w.session && v.seq == w.seq {
				l.removeWaiter(j)
				s.dropWait(n)
				break
			}
		}
		f.dirtyLocks[l.name] = struct{}{}
	}
}
