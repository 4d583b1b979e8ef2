package lockfsm

// lock is one name's entry in the lock table. It exists while the name has a hold, a waiter or a
// lock-delay; once it has none it is forgotten, its primitive and semaphore limit with it.
//
// Invariant after every apply ("settled"): unless the name is delayed, its first waiter cannot be granted
// now (it does not fit beside the holds, or, for a multi-name waiter, it is not first or not free on one
// of its other names). Every change that could break it ends with settle.
type lock struct {
	name string
	ext  *lockExt // the queue, the delay's token, a semaphore's limit, an election's value; nil without them
	prim Primitive
	// delayed: lock-delay after an expiry, no new grant until a LiftDelay with delayToken.
	delayed bool
	// counted: what the lock last added to the table's counts (stats.go: countedHeld, countedDelayed),
	// with countedWaiters.
	counted uint8
	// holdsIn: where the holds are (see holds): first[:1] (oneInline) until a second hold joins the
	// first, ext.holds (spilledHolds) from then on; noHolds before the first.
	holdsIn        uint8
	countedWaiters uint32
	first          [1]hold // a mutex's hold, in the entry itself: a mutex grant allocates nothing
}

// Where a lock's holds are (lock.holdsIn).
const (
	noHolds      = 0 // none, in first[:0]
	oneInline    = 1 // one, in first[:1]
	spilledHolds = 2 // in ext.holds (possibly none again)
)

// lockExt is what a held mutex does not need, kept out of the lock so that a table of held locks costs
// 96 bytes an entry, not 160 (a million held locks: the scale issue's memory per lock). Made when a name
// first has a waiter, a delay, a value or a second hold, or for a semaphore when it is made; kept until
// the name leaves the table.
type lockExt struct {
	holds      []hold   // the holds once a second one joined (spilled)
	waiters    []waiter // FIFO: waiters[0] is next
	delayToken uint64
	value      string // election: the leader's value ("" when nobody leads)
	limit      uint32 // semaphore: its permits N
	used       uint32 // semaphore: permits held (derived from holds)
}

// extended returns l.ext, made if l has none.
func (l *lock) extended() *lockExt {
	if l.ext == nil {
		l.ext = &lockExt{}
	}
	return l.ext
}

// waiters returns the queue (nil when empty). Pointers into it stay valid until the queue changes.
func (l *lock) waiters() []waiter {
	if l.ext == nil {
		return nil
	}
	return l.ext.waiters
}

func (l *lock) setWaiters(ws []waiter) {
	if ws == nil && l.ext == nil {
		return
	}
	l.extended().waiters = ws
}

func (l *lock) delayToken() uint64 {
	if l.ext == nil {
		return 0
	}
	return l.ext.delayToken
}

func (l *lock) setDelayToken(t uint64) {
	if t == 0 && l.ext == nil {
		return
	}
	l.extended().delayToken = t
}

func (l *lock) limit() uint32 {
	if l.ext == nil {
		return 0
	}
	return l.ext.limit
}

func (l *lock) used() uint32 {
	if l.ext == nil {
		return 0
	}
	return l.ext.used
}

func (l *lock) value() string {
	if l.ext == nil {
		return ""
	}
	return l.ext.value
}

func (l *lock) setValue(v string) {
	if v == "" && l.ext == nil {
		return
	}
	l.extended().value = v
}

// hold is one grant: a reentrant owner's levels (count), or one semaphore acquisition. A multi-name hold
// has a copy on each of its names, all with the same names slice, kept identical.
type hold struct {
	session  uint64
	token    uint64
	grantSeq uint64 // Seq of the acquire that created it (0: none, or that acquire's level was cancelled)
	lease    uint64 // LeaseMillis (0 = lives as long as the session)
	owner    string
	count    uint32
	mp       modePermits // its mode, and for a semaphore the permits it takes (0 for other primitives)
	x        *extra      // multi-name: every name, request order (shared by the hold's copies); nil otherwise
}

// modePermits is a hold's mode and permits in one word, the permits (at most MaxPermits) in the low 24
// bits and the mode above them: a hold is then 64 bytes, and a held mutex's entry 96, not 112.
type modePermits uint32

const permitsBits = 24

// A semaphore's permits must fit below the mode (a compile error otherwise).
const _ = uint32(1<<permitsBits - 1 - MaxPermits)

func packMode(m Mode, permits uint32) modePermits {
	return modePermits(uint32(m)<<permitsBits | permits)
}

func (h *hold) mode() Mode      { return Mode(h.mp >> permitsBits) }
func (h *hold) permits() uint32 { return uint32(h.mp) & (1<<permitsBits - 1) }

type waiter struct {
	session  uint64
	seq      uint64 // Seq of the acquire that queued
	enqueued uint64 // index of that acquire
	lease    uint64
	owner    string
	permits  uint32
	mode     Mode
	x        *extra // election value or multi-name names; nil for the rest
}

// extra holds what few holds and waiters need: an election waiter's value, a multi-name request's names.
// Never modified once made (events share the names).
type extra struct {
	value string
	names []string
}

func (h *hold) names() []string {
	if h.x == nil {
		return nil
	}
	return h.x.names
}

func (w *waiter) names() []string {
	if w.x == nil {
		return nil
	}
	return w.x.names
}

func (w *waiter) value() string {
	if w.x == nil {
		return ""
	}
	return w.x.value
}

// holds returns the holds in grant order (a mutex or election has at most one). Pointers into it stay
// valid until a hold is added or removed.
func (l *lock) holds() []hold {
	if l.holdsIn == spilledHolds {
		return l.ext.holds
	}
	return l.first[:l.holdsIn]
}

func (l *lock) held() bool {
	return l.holdsIn == oneInline || l.holdsIn == spilledHolds && len(l.ext.holds) > 0
}

// addHold appends h: the first hold into the entry itself; with a second, both move to the extension.
func (l *lock) addHold(h hold) {
	switch l.holdsIn {
	case spilledHolds:
		l.ext.holds = append(l.ext.holds, h)
	case noHolds:
		l.first[0], l.holdsIn = h, oneInline
	default:
		x := l.extended()
		x.holds = append(x.holds[:0], l.first[0], h)
		l.first[0], l.holdsIn = hold{}, spilledHolds
	}
	if p := h.permits(); p != 0 {
		l.ext.used += p
	}
}

func (l *lock) removeHold(i int) {
	hs := l.holds()
	if p := hs[i].permits(); p != 0 {
		l.ext.used -= p
	}
	copy(hs[i:], hs[i+1:])
	hs[len(hs)-1] = hold{}
	if l.holdsIn == spilledHolds {
		l.ext.holds = hs[:len(hs)-1]
	} else {
		l.holdsIn = noHolds
	}
}

func (l *lock) removeWaiter(i int) {
	ws := l.ext.waiters
	copy(ws[i:], ws[i+1:])
	ws[len(ws)-1] = waiter{}
	l.ext.waiters = ws[:len(ws)-1]
}

// find returns the index of (session, owner)'s hold in mode, or -1. Semaphore holds are found by token.
func (l *lock) find(session uint64, owner string, mode Mode) int {
	for i := range l.holds() {
		if h := &l.holds()[i]; h.session == session && h.mode() == mode && h.owner == owner {
			return i
		}
	}
	return -1
}

func (l *lock) findToken(session uint64, owner string, token uint64) int {
	for i := range l.holds() {
		if h := &l.holds()[i]; h.session == session && h.token == token && h.owner == owner {
			return i
		}
	}
	return -1
}

// waiting returns the 1-based queue position of (session, owner), or 0.
func (l *lock) waiting(session uint64, owner string) uint32 {
	for i := range l.waiters() {
		if w := &l.waiters()[i]; w.session == session && w.owner == owner {
			return uint32(i + 1)
		}
	}
	return 0
}

func (l *lock) hasWriter() bool {
	for i := range l.holds() {
		if l.holds()[i].mode() == ModeExclusive {
			return true
		}
	}
	return false
}

// fits says whether a new hold in mode with permits could join the current holds (the queue and the
// delay aside), by the rules with the bugs planted in k (the FSM's knobs).
func (l *lock) fits(mode Mode, permits uint32, k *knobs) bool {
	switch l.prim {
	case PrimRW:
		if mode == ModeShared {
			return !l.hasWriter() || k.readerBesideWriter
		}
	case PrimSemaphore:
		if k.permitOverN {
			return l.used()+permits <= l.limit()+1
		}
		return l.used()+permits <= l.limit()
	}
	return len(l.holds()) == 0
}

// firstFitting is the first waiter that fits beside the holds, or -1 (for the planted bug semaphoreBarge).
func (l *lock) firstFitting(k *knobs) int {
	for i := range l.waiters() {
		if l.fits(l.waiters()[i].mode, l.waiters()[i].permits, k) {
			return i
		}
	}
	return -1
}

// blocker is the first hold in the way of mode, for ErrLocked (zero when none is).
func (l *lock) blocker(mode Mode) Holder {
	for i := range l.holds() {
		h := &l.holds()[i]
		if l.prim == PrimSemaphore || (l.prim == PrimRW && mode == ModeShared && h.mode() == ModeShared) {
			continue
		}
		return Holder{Session: h.session, Owner: h.owner}
	}
	return Holder{}
}

// newLock puts a new entry for name (a string the state may keep) in the table.
func (f *FSM) newLock(name string, prim Primitive, limit uint32) *lock {
	var l *lock
	if n := len(f.spare); n > 0 {
		l, f.spare[n-1] = f.spare[n-1], nil
		f.spare = f.spare[:n-1]
		l.name, l.prim = name, prim
	} else {
		l = &lock{name: name, prim: prim}
	}
	if prim == PrimSemaphore {
		l.ext = &lockExt{limit: limit}
	}
	f.locks.put(l)
	if _, changed := f.dirtyLocks[name]; !changed {
		// Not in the table at the last prepare and untouched since: the file has no record of it.
		if f.fresh == nil {
			f.fresh = make(map[string]struct{})
		}
		f.fresh[name] = struct{}{}
	}
	return l
}

// touchLock marks l dirty and drops it from the table when it is empty. A name that leaves the table in the
// same commit interval it came in, with no record in the file, is forgotten rather than deleted from the
// file: a lock taken and released between two commits (most are) costs the file nothing.
func (f *FSM) touchLock(l *lock) {
	f.dirtyLocks[l.name] = struct{}{}
	if !l.held() && !l.delayed && len(l.waiters()) == 0 && f.locks.get(l.name) == l {
		f.counts.recount(l) // to nothing: it leaves the table
		f.locks.del(l.name)
		f.dead = append(f.dead, l)
		if _, ok := f.fresh[l.name]; ok {
			delete(f.fresh, l.name)
			delete(f.dirtyLocks, l.name)
		}
	}
}

// grant gives (s, h.owner) the new hold h on l (not a multi-name hold) and reports it.
func (f *FSM) grant(l *lock, s *session, h hold, seq uint64, value string, fromQueue bool, ev []Event) []Event {
	l.addHold(h)
	s.addHold(l)
	f.touchLock(l)
	ev = append(ev, Event{Kind: EventGranted, Name: l.name, Session: s.id, Owner: h.owner, Seq: seq,
		Token: h.token, LeaseMillis: h.lease, FromQueue: fromQueue, Mode: h.mode(), Permits: h.permits()})
	if l.prim == PrimElection {
		l.setValue(value)
		ev = append(ev, Event{Kind: EventLeader, Name: l.name, Session: s.id, Owner: h.owner, Token: h.token,
			Value: value})
	}
	return ev
}

// endHold ends hold i of l whatever its count, on every name of a multi-name hold. The caller then
// settles the freed names (endAndSettle does both).
func (f *FSM) endHold(l *lock, i int, reason Reason, ev []Event) []Event {
	h := l.holds()[i]
	e := Event{Kind: EventReleased, Name: l.name, Session: h.session, Owner: h.owner, Token: h.token,
		Reason: reason, Mode: h.mode(), Permits: h.permits()}
	if h.x == nil {
		l.removeHold(i)
		if l.prim == PrimElection {
			l.setValue("")
		}
		f.unindexHold(l, h.session)
		f.dirtyLocks[l.name] = struct{}{}
		return append(ev, e)
	}
	names := h.names()
	e.Name, e.ExtraNames = names[0], names[1:]
	for _, n := range names {
		m := f.locks.get(n)
		if m == nil {
			continue // only with the planted bug partialMulti
		}
		if j := m.findToken(h.session, h.owner, h.token); j >= 0 {
			m.removeHold(j)
			f.unindexHold(m, h.session)
		}
		f.dirtyLocks[m.name] = struct{}{}
	}
	return append(ev, e)
}

// unindexHold drops l from the session's hold index once the session has no hold left on it.
func (f *FSM) unindexHold(l *lock, session uint64) {
	for i := range l.holds() {
		if l.holds()[i].session == session {
			return
		}
	}
	if s := f.sessions[session]; s != nil {
		s.holds.del(l.name)
	}
}

// endAndSettle ends hold i of l and grants what that freed, name by name in the hold's order.
func (f *FSM) endAndSettle(l *lock, i int, reason Reason, index uint64, ev []Event) []Event {
	names := l.holds()[i].names()
	ev = f.endHold(l, i, reason, ev)
	if names == nil {
		return f.settle(l, index, true, ev)
	}
	for _, n := range names {
		if m := f.locks.get(n); m != nil {
			ev = f.settle(m, index, true, ev)
		}
	}
	return ev
}

// settle grants l's waiters from the head while they fit (L4: in the entry that made room, token index),
// reports an election left without a leader (ended: a hold ended in this entry), and drops l if empty.
func (f *FSM) settle(l *lock, index uint64, ended bool, ev []Event) []Event {
	ev = f.promote(l, index, ev)
	if ended && l.prim == PrimElection && !l.held() {
		ev = append(ev, Event{Kind: EventLeader, Name: l.name})
	}
	f.touchLock(l)
	return ev
}

// promote grants l's queue head while it can be granted: one writer, mutex or election waiter, a run of
// readers, or semaphore requests in order until the first that does not fit (never overtaken). A
// multi-name head is granted when it is first and free on every one of its names.
func (f *FSM) promote(l *lock, index uint64, ev []Event) []Event {
	for !l.delayed && len(l.waiters()) > 0 {
		i := 0
		if f.k.grantTail && len(l.waiters()) > 1 {
			i = len(l.waiters()) - 1
		}
		w := &l.waiters()[i]
		if f.endingBlocks(w) {
			return ev
		}
		if w.names() != nil {
			if !multiReady(f.locks, w) {
				return ev
			}
			ev = f.grantMultiFromQueue(*w, index, ev)
			continue
		}
		if !l.fits(w.mode, w.permits, &f.k) {
			if f.k.semaphoreBarge && l.prim == PrimSemaphore {
				if j := l.firstFitting(&f.k); j > 0 && !f.endingBlocks(&l.waiters()[j]) {
					i, w = j, &l.waiters()[j]
				}
			}
			if !l.fits(w.mode, w.permits, &f.k) {
				return ev
			}
		}
		wv := *w
		l.removeWaiter(i)
		s := f.sessions[wv.session]
		s.dropWait(l.name)
		f.markGranted(s, wv.seq, index)
		token := index
		if f.k.enqueueToken {
			token = wv.enqueued
		}
		ev = f.grant(l, s, hold{session: s.id, owner: wv.owner, token: token, grantSeq: wv.seq, lease: wv.lease,
			count: 1, mp: packMode(wv.mode, wv.permits)}, wv.seq, wv.value(), true, ev)
	}
	return ev
}

// markGranted turns the retained Queued result of seq into its grant, so a retry reports it.
func (f *FSM) markGranted(s *session, seq, index uint64) {
	if r, ok := s.lookup(seq); ok && r.status == Queued {
		*r = retained{seq: seq, status: Granted, token: index, holdCount: 1}
		f.dirtySessions[s.id] = struct{}{}
	}
}

// release applies KindRelease: one hold level of (Session, Owner) — in Mode for a read-write lock, the
// hold with Token for a semaphore. For every primitive but the mutex, a nonzero Token must be the hold's.
func (f *FSM) release(index uint64, s *session, c *Command, ev []Event) (Result, []Event) {
	l := f.locks.get(c.Name)
	if l == nil {
		return Result{Err: ErrNotHolder}, ev
	}
	if c.Primitive != l.prim {
		return Result{Err: ErrWrongKind}, ev
	}
	var i int
	switch l.prim {
	case PrimRW:
		i = l.find(s.id, c.Owner, c.Mode)
	case PrimSemaphore:
		i = l.findToken(s.id, c.Owner, c.Token)
	default:
		i = l.find(s.id, c.Owner, ModeExclusive)
	}
	if i < 0 || (l.prim != PrimMutex && c.Token != 0 && l.holds()[i].token != c.Token) {
		return Result{Err: ErrNotHolder}, ev
	}
	h := &l.holds()[i]
	token := h.token
	if h.count > 1 {
		count := f.addLevels(l, i, -1)
		return Result{Status: Released, Token: token, HoldCount: count}, ev
	}
	ev = f.endAndSettle(l, i, ReasonUnlock, index, ev)
	return Result{Status: Released, Token: token}, ev
}

// addLevels adds delta to hold i's count, on every copy of a multi-name hold, and returns the new count.
func (f *FSM) addLevels(l *lock, i int, delta int32) uint32 {
	h := &l.holds()[i]
	count := uint32(int32(h.count) + delta)
	f.eachCopy(l, i, func(c *hold) { c.count = count })
	return count
}

// eachCopy calls fn on hold i of l and, for a multi-name hold, on its copy on every other name.
func (f *FSM) eachCopy(l *lock, i int, fn func(*hold)) {
	h := l.holds()[i]
	if h.x == nil {
		fn(&l.holds()[i])
		f.dirtyLocks[l.name] = struct{}{}
		return
	}
	for _, n := range h.names() {
		m := f.locks.get(n)
		if m == nil {
			continue
		}
		if j := m.findToken(h.session, h.owner, h.token); j >= 0 {
			fn(&m.holds()[j])
			f.dirtyLocks[m.name] = struct{}{}
		}
	}
}

// cancel applies KindCancel: undo the acquire (Session, Target) for Owner on Name. A queued acquire leaves
// its queue (every queue of a multi-name acquire); a granted one gives back the level it added (a full
// release and handoff if that was the last); one never applied gets a tombstone so a late copy of it is a
// duplicate with errCancelled.
//
// A granted acquire is recognised by the hold itself (grantSeq: it created the hold) or by its retained
// result (a grant with the hold's token: a reentrant level). The first matters when the acquire was
// queued, its Queued result was acknowledged and dropped, and it was then granted from the queue just
// before the cancel: without it the cancel would find nothing and leave a holder whose caller has already
// given up (S4).
func (f *FSM) cancel(index uint64, s *session, c *Command, ev []Event) (Result, []Event) {
	l := f.locks.get(c.Name)
	if l != nil {
		for i := range l.waiters() {
			w := &l.waiters()[i]
			if w.session != s.id || w.seq != c.Target || w.owner != c.Owner {
				continue
			}
			wv := *w
			e := Event{Kind: EventWaitEnded, Name: l.name, Session: s.id, Owner: wv.owner, Seq: wv.seq,
				Reason: ReasonCancel}
			markCancelled(s, c.Target)
			if names := wv.names(); names != nil {
				e.Name, e.ExtraNames = names[0], names[1:]
				ev = append(ev, e)
				f.dropMultiWaiter(&wv)
				for _, n := range names {
					if m := f.locks.get(n); m != nil {
						ev = f.settleAfterCancel(m, index, ev)
					}
				}
				return Result{Status: Cancelled}, ev
			}
			ev = append(ev, e)
			l.removeWaiter(i)
			s.dropWait(l.name)
			ev = f.settleAfterCancel(l, index, ev)
			return Result{Status: Cancelled}, ev
		}
	}
	t, ok := s.lookup(c.Target)
	if l != nil {
		i := -1
		for j := range l.holds() {
			if h := &l.holds()[j]; h.session == s.id && h.owner == c.Owner && c.Target != 0 && h.grantSeq == c.Target {
				i = j
				break
			}
		}
		if i < 0 && ok && t.code == 0 && t.status == Granted {
			i = l.findToken(s.id, c.Owner, t.token)
		}
		if i >= 0 {
			markCancelled(s, c.Target)
			h := &l.holds()[i]
			token := h.token
			if h.grantSeq == c.Target {
				// Its level is given back: a second cancel of it finds nothing.
				f.eachCopy(l, i, func(c *hold) { c.grantSeq = 0 })
			}
			if h.count > 1 {
				count := f.addLevels(l, i, -1)
				return Result{Status: Cancelled, Token: token, HoldCount: count}, ev
			}
			ev = f.endAndSettle(l, i, ReasonCancel, index, ev)
			return Result{Status: Cancelled, Token: token}, ev
		}
	}
	if !ok && c.Target >= s.lowWater && c.Target != c.Seq {
		s.store(retained{seq: c.Target, code: errToCode(errCancelled), status: Cancelled})
	}
	return Result{Status: NotFound}, ev
}

func (f *FSM) settleAfterCancel(l *lock, index uint64, ev []Event) []Event {
	if f.k.noSettleOnCancel {
		f.touchLock(l)
		return ev
	}
	return f.settle(l, index, false, ev)
}

// markCancelled turns the retained result of seq (if any) into the cancelled tombstone, so the acquire's
// retries report errCancelled and a second cancel of it finds nothing.
func markCancelled(s *session, seq uint64) {
	if r, ok := s.lookup(seq); ok {
		*r = retained{seq: seq, code: errToCode(errCancelled), status: Cancelled}
	}
}

// expireLease applies KindExpireLease: the hold with token Token ends (with Session and Owner set, only
// theirs: readers or permits granted in one entry share a token); stale expiries are no-ops.
func (f *FSM) expireLease(index uint64, c *Command, ev []Event) (Result, []Event) {
	l := f.locks.get(c.Name)
	if l == nil {
		return Result{Status: NotFound}, ev
	}
	pick := c.Version != 1 // version 1 matched the token alone
	i := -1
	for j := range l.holds() {
		h := &l.holds()[j]
		if h.token == c.Token && (!pick || ((c.Session == 0 || h.session == c.Session) &&
			(c.Owner == "" || h.owner == c.Owner))) {
			i = j
			break
		}
	}
	if i < 0 {
		return Result{Status: NotFound}, ev
	}
	ev = f.endAndSettle(l, i, ReasonLeaseExpired, index, ev)
	return Result{Status: LeaseExpired, Token: c.Token}, ev
}

// liftDelay applies KindLiftDelay: the delay started at Token ends and the name goes to its next waiters.
func (f *FSM) liftDelay(index uint64, c *Command, ev []Event) (Result, []Event) {
	l := f.locks.get(c.Name)
	if l == nil || !l.delayed || l.delayToken() != c.Token {
		return Result{Status: NotFound}, ev
	}
	l.delayed = false
	l.setDelayToken(0)
	ev = f.settle(l, index, false, ev)
	return Result{Status: Lifted, Token: c.Token}, ev
}
