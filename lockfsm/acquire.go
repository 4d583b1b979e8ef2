package lockfsm

// Limits of the catalogue, checked deterministically at apply.
const (
	// MaxPermits is the largest semaphore (Limit).
	MaxPermits = 1 << 20
	// MaxMultiNames is the most names one multi-name acquire may take (Name plus ExtraNames). Each name's
	// record carries the whole list, so a multi-name hold costs about MaxMultiNames² name lengths on disk
	// at worst.
	MaxMultiNames = 32
	// MaxValueLen is the longest election value, in bytes.
	MaxValueLen = 1024
)

// acquire applies KindAcquire (name and owner already valid): the primitive's own rules, on the shared
// machinery of take.
func (f *FSM) acquire(index uint64, s *session, c *Command, ev []Event) (Result, []Event) {
	if c.Version == 1 {
		// Version 1 reserved these fields; its entries keep the answer they got then.
		if c.Mode != ModeExclusive || c.Permits > 1 || len(c.ExtraNames) != 0 {
			return Result{Err: errUnsupported}, ev
		}
		return f.acquireMutex(index, s, c, ev)
	}
	extra := len(c.ExtraNames) != 0
	switch c.Primitive {
	case PrimMutex:
		if c.Mode != ModeExclusive || c.Permits > 1 || c.Limit != 0 || c.Value != "" {
			break
		}
		if extra {
			return f.acquireMulti(index, s, c, ev)
		}
		return f.acquireMutex(index, s, c, ev)
	case PrimRW:
		if c.Mode >= modeEnd || c.Permits > 1 || c.Limit != 0 || c.Value != "" || extra {
			break
		}
		return f.acquireRW(index, s, c, ev)
	case PrimSemaphore:
		if c.Mode != ModeExclusive || c.Value != "" || extra {
			break
		}
		return f.acquireSemaphore(index, s, c, ev)
	case PrimElection:
		if c.Mode != ModeExclusive || c.Permits > 1 || c.Limit != 0 || extra {
			break
		}
		return f.campaign(index, s, c, ev)
	}
	return Result{Err: errUnsupported}, ev
}

// acquireMutex: reentrant for the same (Session, Owner) up to MaxHolds, else take.
func (f *FSM) acquireMutex(index uint64, s *session, c *Command, ev []Event) (Result, []Event) {
	l := f.locks.get(c.Name)
	if l != nil {
		if l.prim != PrimMutex {
			return Result{Err: ErrWrongKind}, ev
		}
		if len(l.holds()) == 1 && l.holds()[0].session == s.id && l.holds()[0].owner == c.Owner {
			if l.holds()[0].x != nil {
				return Result{Err: ErrHoldConflict}, ev
			}
			return f.reenter(l, 0, c), ev
		}
	}
	return f.take(index, s, c, l, PrimMutex, ModeExclusive, 0, ev)
}

// reenter adds a level to hold i (MaxHolds permitting) and keeps its token.
func (f *FSM) reenter(l *lock, i int, c *Command) Result {
	maxHolds := c.MaxHolds
	if maxHolds == 0 {
		maxHolds = defaultMaxHolds
	}
	h := &l.holds()[i]
	if h.count >= maxHolds {
		return Result{Err: ErrTooManyHolds, Token: h.token, HoldCount: h.count}
	}
	count := f.addLevels(l, i, 1)
	return Result{Status: Granted, Token: h.token, HoldCount: count}
}

// acquireRW: reentrant per (Session, Owner) in each mode; a writer may take the read side at once
// (downgrade); a reader asking to write gets ErrUpgrade; the rest is take, FIFO over one queue.
func (f *FSM) acquireRW(index uint64, s *session, c *Command, ev []Event) (Result, []Event) {
	l := f.locks.get(c.Name)
	if l != nil {
		if l.prim != PrimRW {
			return Result{Err: ErrWrongKind}, ev
		}
		if i := l.find(s.id, c.Owner, c.Mode); i >= 0 {
			return f.reenter(l, i, c), ev
		}
		if c.Mode == ModeExclusive && l.find(s.id, c.Owner, ModeShared) >= 0 {
			return Result{Err: ErrUpgrade}, ev
		}
		if c.Mode == ModeShared && l.find(s.id, c.Owner, ModeExclusive) >= 0 {
			// Downgrade: the writer is the only other holder, so its read side is granted now, ahead of the
			// queue (queuing would wait for itself).
			ev = f.grant(l, s, hold{session: s.id, owner: f.ownOwner(c.Owner), token: index, grantSeq: c.Seq,
				lease: c.LeaseMillis, count: 1, mp: packMode(ModeShared, 0)}, c.Seq, "", false, ev)
			return Result{Status: Granted, Token: index, HoldCount: 1}, ev
		}
	}
	return f.take(index, s, c, l, PrimRW, c.Mode, 0, ev)
}

// acquireSemaphore: Permits (k, 0 meaning 1) of Limit (N) as a hold of its own.
func (f *FSM) acquireSemaphore(index uint64, s *session, c *Command, ev []Event) (Result, []Event) {
	k := max(c.Permits, 1)
	if c.Limit == 0 || c.Limit > MaxPermits || k > c.Limit {
		return Result{Err: ErrBadPermits}, ev
	}
	l := f.locks.get(c.Name)
	if l != nil {
		if l.prim != PrimSemaphore {
			return Result{Err: ErrWrongKind}, ev
		}
		if l.limit() != c.Limit {
			return Result{Err: ErrPermitsMismatch}, ev
		}
		own := k
		for i := range l.holds() {
			if h := &l.holds()[i]; h.session == s.id && h.owner == c.Owner {
				own += h.permits()
			}
		}
		if own > l.limit() {
			// Only the owner's own release could make room: refuse rather than wait for itself.
			return Result{Err: ErrHoldConflict}, ev
		}
	}
	return f.take(index, s, c, l, PrimSemaphore, ModeExclusive, k, ev)
}

// campaign: an exclusive, fair, non-reentrant acquire carrying Value.
func (f *FSM) campaign(index uint64, s *session, c *Command, ev []Event) (Result, []Event) {
	if len(c.Value) > MaxValueLen {
		return Result{Err: ErrInvalidValue}, ev
	}
	l := f.locks.get(c.Name)
	if l != nil {
		if l.prim != PrimElection {
			return Result{Err: ErrWrongKind}, ev
		}
		if l.find(s.id, c.Owner, ModeExclusive) >= 0 {
			return Result{Err: ErrHoldConflict}, ev
		}
	}
	return f.take(index, s, c, l, PrimElection, ModeExclusive, 0, ev)
}

// take grants a new hold now when the name is not delayed, nobody waits (no barging) and the hold fits
// beside the current ones; otherwise a try fails with ErrLocked and never queues, and a waiting acquire
// joins the FIFO queue (ErrAlreadyWaiting if that owner is queued on the name). l is nil for a free name.
func (f *FSM) take(index uint64, s *session, c *Command, l *lock, prim Primitive, mode Mode, permits uint32,
	ev []Event) (Result, []Event) {
	bug := false
	owner := "" // c.Owner owned, once made
	if l == nil {
		var name string
		if o, ok := f.cachedOwner(c.Owner); ok {
			name, owner = f.own(c.Name), o
		} else {
			name, owner = f.ownPair(c.Name, c.Owner)
			f.cacheOwner(owner)
		}
		l = f.newLock(name, prim, c.Limit)
	} else if f.k.grantWhileHeld && !l.delayed && prim != PrimSemaphore && mode == ModeExclusive {
		// Planted bug: the holder check is skipped (the old holder is overwritten).
		for len(l.holds()) > 0 {
			l.removeHold(0)
		}
		bug = true
	}
	if !l.delayed && (bug || len(l.waiters()) == 0 && l.fits(mode, permits, &f.k)) {
		value := ""
		if prim == PrimElection {
			value = f.own(c.Value)
		}
		if owner == "" {
			owner = f.ownOwner(c.Owner)
		}
		ev = f.grant(l, s, hold{session: s.id, owner: owner, token: index, grantSeq: c.Seq,
			lease: c.LeaseMillis, count: 1, mp: packMode(mode, permits)}, c.Seq, value, false, ev)
		return Result{Status: Granted, Token: index, HoldCount: 1}, ev
	}
	if !c.Wait {
		return Result{Err: ErrLocked, Holder: l.blocker(mode)}, ev
	}
	if pos := l.waiting(s.id, c.Owner); pos != 0 {
		return Result{Err: ErrAlreadyWaiting, Position: pos}, ev
	}
	if owner == "" {
		owner = f.ownOwner(c.Owner)
	}
	w := waiter{session: s.id, owner: owner, seq: c.Seq, enqueued: index, lease: c.LeaseMillis,
		mode: mode, permits: permits}
	if prim == PrimElection && c.Value != "" {
		w.x = &extra{value: f.own(c.Value)}
	}
	l.setWaiters(append(l.waiters(), w))
	s.addWait(l.name)
	f.touchLock(l)
	return Result{Status: Queued, Position: uint32(len(l.waiters()))}, ev
}

// proclaim applies KindProclaim: the leader of the election Name, (Session, Owner), announces Value; a
// nonzero Token must be its term. An unchanged value changes nothing and reports no event.
func (f *FSM) proclaim(s *session, c *Command, ev []Event) (Result, []Event) {
	if len(c.Value) > MaxValueLen {
		return Result{Err: ErrInvalidValue}, ev
	}
	l := f.locks.get(c.Name)
	if l == nil {
		return Result{Err: ErrNotHolder}, ev
	}
	if l.prim != PrimElection {
		return Result{Err: ErrWrongKind}, ev
	}
	i := l.find(s.id, c.Owner, ModeExclusive)
	if i < 0 || (c.Token != 0 && l.holds()[i].token != c.Token) {
		return Result{Err: ErrNotHolder}, ev
	}
	h := &l.holds()[i]
	if l.value() != c.Value {
		v := f.own(c.Value)
		l.setValue(v)
		f.dirtyLocks[l.name] = struct{}{}
		ev = append(ev, Event{Kind: EventLeader, Name: l.name, Session: h.session, Owner: h.owner, Token: h.token,
			Value: v})
	}
	return Result{Status: Proclaimed, Token: h.token, HoldCount: h.count}, ev
}
