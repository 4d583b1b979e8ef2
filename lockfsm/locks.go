package lockfsm

// lock is one name's entry in the lock table. A lock exists while it is held, has waiters or is delayed;
// a free name with waiters exists only while delayed.
type lock struct {
	name       string
	holder     Holder // Session 0: nobody holds it
	holdCount  uint32
	token      uint64 // index of the entry that granted the current hold
	grantSeq   uint64 // Seq of the acquire that created the current hold (0: none, or cancelled)
	lease      uint64 // LeaseMillis of the current hold (0 = lives as long as the session)
	delayed    bool   // lock-delay after an expiry: granted to nobody until a LiftDelay with delayToken
	delayToken uint64
	waiters    []waiter // FIFO: waiters[0] is next
}

type waiter struct {
	session  uint64
	owner    string
	seq      uint64 // Seq of the acquire that queued
	enqueued uint64 // index of that acquire
	lease    uint64
}

func (l *lock) held() bool { return l.holder.Session != 0 }

func (l *lock) heldBy(session uint64, owner string) bool {
	return l.holder.Session == session && l.holder.Owner == owner
}

// touchLock marks l dirty and drops it from the table when it is empty.
func (f *FSM) touchLock(l *lock) {
	f.dirtyLocks[l.name] = struct{}{}
	if !l.held() && !l.delayed && len(l.waiters) == 0 {
		delete(f.locks, l.name)
	}
}

// acquire applies KindAcquire (name and owner already valid).
func (f *FSM) acquire(index uint64, s *session, c *Command, ev []Event) (Result, []Event) {
	if c.Mode != ModeExclusive || c.Permits > 1 || len(c.ExtraNames) != 0 {
		return Result{Err: ErrUnsupported}, ev
	}
	l := f.locks[c.Name]
	if l == nil {
		l = &lock{name: own(c.Name)}
		f.locks[l.name] = l
	}
	if l.heldBy(s.id, c.Owner) {
		maxHolds := c.MaxHolds
		if maxHolds == 0 {
			maxHolds = DefaultMaxHolds
		}
		if l.holdCount >= maxHolds {
			return Result{Err: ErrTooManyHolds, Token: l.token, HoldCount: l.holdCount}, ev
		}
		l.holdCount++
		f.touchLock(l)
		return Result{Status: Granted, Token: l.token, HoldCount: l.holdCount}, ev
	}
	if (!l.held() || testHookGrantWhileHeld) && !l.delayed {
		ev = f.grant(l, s, own(c.Owner), c.Seq, index, c.LeaseMillis, false, ev)
		return Result{Status: Granted, Token: index, HoldCount: 1}, ev
	}
	if !c.Wait {
		return Result{Err: ErrLocked, Holder: l.holder}, ev
	}
	for i := range l.waiters {
		if w := &l.waiters[i]; w.session == s.id && w.owner == c.Owner {
			return Result{Err: ErrAlreadyWaiting, Position: uint32(i + 1)}, ev
		}
	}
	l.waiters = append(l.waiters, waiter{session: s.id, owner: own(c.Owner), seq: c.Seq, enqueued: index,
		lease: c.LeaseMillis})
	s.addWait(l.name)
	f.touchLock(l)
	return Result{Status: Queued, Position: uint32(len(l.waiters))}, ev
}

// grant makes (s, owner) the holder of the free name l with token index.
func (f *FSM) grant(l *lock, s *session, owner string, seq, index, lease uint64, fromQueue bool, ev []Event) []Event {
	l.holder = Holder{Session: s.id, Owner: owner}
	l.holdCount = 1
	l.token = index
	l.grantSeq = seq
	l.lease = lease
	s.addHold(l.name)
	f.touchLock(l)
	return append(ev, Event{Kind: EventGranted, Name: l.name, Session: s.id, Owner: owner, Seq: seq,
		Token: index, LeaseMillis: lease, FromQueue: fromQueue})
}

// endHold ends l's current hold whatever its count (the caller hands the name on with handoff).
func (f *FSM) endHold(l *lock, reason Reason, ev []Event) []Event {
	ev = append(ev, Event{Kind: EventReleased, Name: l.name, Session: l.holder.Session, Owner: l.holder.Owner,
		Token: l.token, Reason: reason})
	if s := f.sessions[l.holder.Session]; s != nil {
		delete(s.holds, l.name)
	}
	l.holder = Holder{}
	l.holdCount = 0
	l.grantSeq = 0
	l.lease = 0
	f.dirtyLocks[l.name] = struct{}{}
	return ev
}

// handoff grants the free, undelayed name l to its queue head with token index (L4: the release and the
// grant are one entry), or drops l when nobody waits.
func (f *FSM) handoff(l *lock, index uint64, ev []Event) []Event {
	if !l.held() && !l.delayed && len(l.waiters) > 0 {
		w := l.waiters[0]
		if testHookGrantTail && len(l.waiters) > 1 {
			w = l.waiters[len(l.waiters)-1]
			l.waiters = l.waiters[:len(l.waiters)-1]
		} else {
			l.waiters[0] = waiter{}
			l.waiters = l.waiters[1:]
		}
		s := f.sessions[w.session]
		s.dropWait(l.name)
		if r, ok := s.lookup(w.seq); ok && r.status == Queued {
			// A retry of the acquire now reports its grant.
			*r = retained{seq: w.seq, status: Granted, token: index, holdCount: 1}
			f.dirtySessions[s.id] = struct{}{}
		}
		ev = f.grant(l, s, w.owner, w.seq, index, w.lease, true, ev)
	}
	f.touchLock(l)
	return ev
}

// testHookGrantTail plants a FIFO bug (grant the queue's tail) so tests can show the checker catches it.
var testHookGrantTail = false

// release applies KindRelease: one hold level of (Session, Owner).
func (f *FSM) release(index uint64, s *session, c *Command, ev []Event) (Result, []Event) {
	l := f.locks[c.Name]
	if l == nil || !l.heldBy(s.id, c.Owner) {
		return Result{Err: ErrNotHolder}, ev
	}
	token := l.token
	l.holdCount--
	if l.holdCount > 0 {
		f.touchLock(l)
		return Result{Status: Released, Token: token, HoldCount: l.holdCount}, ev
	}
	ev = f.endHold(l, ReasonUnlock, ev)
	ev = f.handoff(l, index, ev)
	return Result{Status: Released, Token: token}, ev
}

// cancel applies KindCancel: undo the acquire (Session, Target) for Owner on Name. A queued acquire leaves
// the queue; a granted one gives back the level it added (a full release and handoff if that was the last);
// one never applied gets a tombstone so a late copy of it is a duplicate with ErrCancelled.
//
// A granted acquire is recognised by the lock itself (grantSeq: it created the current hold) or by its
// retained result (a grant with the current token: a reentrant level). The first matters when the acquire
// was queued, its Queued result was acknowledged and dropped, and it was then granted from the queue just
// before the cancel: without it the cancel would find nothing and leave a holder whose caller has already
// given up (S4).
func (f *FSM) cancel(index uint64, s *session, c *Command, ev []Event) (Result, []Event) {
	l := f.locks[c.Name]
	if l != nil {
		for i := range l.waiters {
			w := &l.waiters[i]
			if w.session != s.id || w.seq != c.Target || w.owner != c.Owner {
				continue
			}
			ev = append(ev, Event{Kind: EventWaitEnded, Name: l.name, Session: s.id, Owner: w.owner, Seq: w.seq,
				Reason: ReasonCancel})
			copy(l.waiters[i:], l.waiters[i+1:])
			l.waiters[len(l.waiters)-1] = waiter{}
			l.waiters = l.waiters[:len(l.waiters)-1]
			s.dropWait(l.name)
			markCancelled(s, c.Target)
			f.touchLock(l)
			return Result{Status: Cancelled}, ev
		}
	}
	t, ok := s.lookup(c.Target)
	if l != nil && l.heldBy(s.id, c.Owner) && ((c.Target != 0 && l.grantSeq == c.Target) ||
		(ok && t.code == 0 && t.status == Granted && t.token == l.token)) {
		markCancelled(s, c.Target)
		if l.grantSeq == c.Target {
			l.grantSeq = 0 // its level is given back: a second cancel of it finds nothing
		}
		token := l.token
		l.holdCount--
		if l.holdCount > 0 {
			f.touchLock(l)
			return Result{Status: Cancelled, Token: token, HoldCount: l.holdCount}, ev
		}
		ev = f.endHold(l, ReasonCancel, ev)
		ev = f.handoff(l, index, ev)
		return Result{Status: Cancelled, Token: token}, ev
	}
	if !ok && c.Target >= s.lowWater && c.Target != c.Seq {
		s.store(retained{seq: c.Target, code: errToCode(ErrCancelled), status: Cancelled})
	}
	return Result{Status: NotFound}, ev
}

// markCancelled turns the retained result of seq (if any) into the cancelled tombstone, so the acquire's
// retries report ErrCancelled and a second cancel of it finds nothing.
func markCancelled(s *session, seq uint64) {
	if r, ok := s.lookup(seq); ok {
		*r = retained{seq: seq, code: errToCode(ErrCancelled), status: Cancelled}
	}
}

// expireLease applies KindExpireLease: the hold with token Token ends; stale expiries are no-ops.
func (f *FSM) expireLease(index uint64, c *Command, ev []Event) (Result, []Event) {
	l := f.locks[c.Name]
	if l == nil || !l.held() || l.token != c.Token {
		return Result{Status: NotFound}, ev
	}
	ev = f.endHold(l, ReasonLeaseExpired, ev)
	ev = f.handoff(l, index, ev)
	return Result{Status: LeaseExpired, Token: c.Token}, ev
}

// liftDelay applies KindLiftDelay: the delay started at Token ends and the name goes to its next waiter.
func (f *FSM) liftDelay(index uint64, c *Command, ev []Event) (Result, []Event) {
	l := f.locks[c.Name]
	if l == nil || !l.delayed || l.delayToken != c.Token {
		return Result{Status: NotFound}, ev
	}
	l.delayed = false
	l.delayToken = 0
	ev = f.handoff(l, index, ev)
	return Result{Status: Lifted, Token: c.Token}, ev
}
