package lockfsm

import "slices"

// maxRetainedResults bounds the results kept per session for deduplication (S6). A session keeps the
// results of its applied sequence numbers >= its acknowledged low-water mark (the highest AckedBelow it has
// sent), and at most maxRetainedResults of them: beyond that the lowest is evicted and the low-water mark
// moves above it, so a later retry of an evicted sequence number gets errStaleSequence (never a second
// apply). Memory is therefore bounded by sessions × maxRetainedResults × (about 64 bytes + the holder owner
// string kept with ErrLocked results); a well-behaved node acknowledges promptly and keeps only its
// in-flight commands.
const maxRetainedResults = 1024

// session is one open session: its identity, its deduplication window and indexes of what it holds and
// waits for (derived from the lock table, never persisted on their own).
type session struct {
	id, node, ttl uint64
	// lowWater: every seq < lowWater is stale. Raised by AckedBelow and by eviction.
	lowWater uint64
	// results are the retained results, ascending by seq.
	results []retained
	// ckpt is the session's latest checkpoint mark (checkpoint.go): 0 live, silence in ms + 1 silent.
	ckpt uint64
	// holds are the entries of the names this session has at least one hold on (an entry is in the
	// table while a hold is on it; unindexHold drops it when the session's last hold there ends).
	holds lockTable
	waits map[string]uint32 // names this session waits for → number of its waiters there
	// waiting is the sum of waits: SessionInfo reads it on every proposal a leader authorises (the
	// session's quota), so it must not cost a pass over a session's hundreds of thousands of waits.
	waiting int
	// ending is set while the session ends over several entries (ending.go); nil for an open session.
	ending *ending
}

// retained is a stored result, in the form that round-trips through bbolt and snapshots.
type retained struct {
	seq       uint64
	code      uint8 // error code, see errCodes
	status    Status
	token     uint64
	holdCount uint32
	position  uint32
	holder    Holder
}

func (r *retained) result() Result {
	err, _ := codeToErr(r.code)
	return Result{Err: err, Status: r.status, Token: r.token, HoldCount: r.holdCount, Position: r.position,
		Holder: r.holder}
}

func toRetained(seq uint64, r *Result) retained {
	return retained{seq: seq, code: errToCode(r.Err), status: r.Status, token: r.Token, holdCount: r.HoldCount,
		position: r.Position, holder: r.Holder}
}

func cmpRetained(a retained, seq uint64) int {
	switch {
	case a.seq < seq:
		return -1
	case a.seq > seq:
		return 1
	}
	return 0
}

// lookup returns the retained result for seq, if any. The pointer is valid until the next store.
func (s *session) lookup(seq uint64) (*retained, bool) {
	i, ok := slices.BinarySearchFunc(s.results, seq, cmpRetained)
	if !ok {
		return nil, false
	}
	return &s.results[i], true
}

// ack raises the low-water mark to ackedBelow (clamped to seq, the command's own sequence number, so a
// command never acknowledges itself) and drops results below it.
func (s *session) ack(ackedBelow, seq uint64) {
	ackedBelow = min(ackedBelow, seq)
	if ackedBelow <= s.lowWater {
		return
	}
	s.lowWater = ackedBelow
	i, _ := slices.BinarySearchFunc(s.results, ackedBelow, cmpRetained)
	if i > 0 {
		s.results = slices.Delete(s.results, 0, i)
	}
}

// store records r as the result of seq (seq must not be retained yet) and evicts the lowest results beyond
// maxRetainedResults.
func (s *session) store(r retained) {
	n := len(s.results)
	if n == 0 || s.results[n-1].seq < r.seq {
		s.results = append(s.results, r)
	} else {
		i, _ := slices.BinarySearchFunc(s.results, r.seq, cmpRetained)
		s.results = slices.Insert(s.results, i, r)
	}
	if over := len(s.results) - maxRetainedResults; over > 0 {
		s.lowWater = max(s.lowWater, s.results[over-1].seq+1)
		s.results = slices.Delete(s.results, 0, over)
	}
}

func (s *session) addHold(l *lock) {
	s.holds.put(l)
}

func (s *session) addWait(name string) {
	if s.waits == nil {
		s.waits = make(map[string]uint32)
	}
	s.waits[name]++
	s.waiting++
}

func (s *session) dropWait(name string) {
	n, ok := s.waits[name]
	if !ok {
		return
	}
	if n > 1 {
		s.waits[name] = n - 1
	} else {
		delete(s.waits, name)
	}
	s.waiting--
}

// openSession applies KindOpenSession: the session id is the entry's index.
func (f *FSM) openSession(index uint64, c *Command, ev []Event) (Result, []Event) {
	f.sessions[index] = &session{id: index, node: c.Node, ttl: c.TTLMillis}
	f.dirtySessions[index] = struct{}{}
	ev = append(ev, Event{Kind: EventSessionOpened, Session: index, Node: c.Node, TTLMillis: c.TTLMillis, Seq: c.Seq})
	return Result{Status: SessionOpened, Session: index}, ev
}

// endSession applies KindCloseSession and KindExpireSession. With no run limit (version 1 and 2, or
// Limit 0) the whole session ends in this entry (endRun). With a run limit (version 3: Limit > 0), a
// session with more waits and holds than the limit starts ending instead: it is marked ending (its
// commands get ErrNoSession from now on, its waiters are never granted), this entry ends its first run
// and the leader's KindEndSessionRun entries the rest (ending.go). A close or expiry of a session already
// ending ends the rest of it at once without a limit, and is a no-op (SessionClosed) with one.
func (f *FSM) endSession(index uint64, c *Command, reason Reason, delay uint64, ev []Event) (Result, []Event) {
	s := f.sessions[c.Session]
	if s == nil {
		return Result{Err: ErrNoSession}, ev
	}
	limit := runLimit(c)
	if s.ending != nil {
		if limit > 0 {
			return Result{Status: SessionClosed, Session: s.id}, ev
		}
		reason, delay = s.ending.reason, s.ending.delay
	}
	if limit == 0 || len(s.waits)+s.holds.len() <= limit {
		return f.endRun(index, s, reason, delay, -1, ev)
	}
	s.ending = &ending{reason: reason, delay: delay}
	f.dirtySessions[s.id] = struct{}{}
	ev = append(ev, Event{Kind: EventSessionEnding, Session: s.id, Reason: reason})
	return f.endRun(index, s, reason, delay, limit, ev)
}

// endRun ends up to limit of the session's names (all when limit < 0): first the names it waits for,
// every waiter of the session leaving each queue (sorted names, queue order within a name; a multi-name
// waiter leaves all its queues, with one event, where it is first met), then the names it holds, every hold released (sorted names; a
// multi-name hold at the first of its names reached) and its names delayed when delay > 0, each name
// granted to its next waiters as soon as its holds of the session are gone; last, every other name whose
// queue or holds changed is settled (sorted). Once nothing is left the session goes, in the same entry.
//
// A run counts only names the session still waits for or holds when it reaches them, in sorted order of
// what is left, so a replica that rebuilt its run queue after a restart or a snapshot ends the same names
// in the same entries as one that kept it (the sets only shrink while a session ends).
func (f *FSM) endRun(index uint64, s *session, reason Reason, delay uint64, limit int, ev []Event) (Result, []Event) {
	var waitQ, holdQ *nameQueue
	if limit < 0 {
		// About an event per wait and two per hold (released, delayed), plus the
		// grants: sized once, since a session can hold a million names and the
		// slice would otherwise be copied at every doubling.
		ev = slices.Grow(ev, len(s.waits)+2*s.holds.len()+1)
		f.names = sortedKeys(f.names, s.waits)
		q := sortedQueue(f.names)
		waitQ = &q
	} else {
		ev = slices.Grow(ev, 2*limit+1)
		s.ending.queue(s)
		waitQ = &s.ending.waitQ
	}
	done := 0
	touched := f.touched[:0]
	for done != limit {
		name, more := waitQ.next()
		if !more {
			break
		}
		n, ok := s.waits[name]
		if !ok {
			if f.k.runCountsGone && limit > 0 {
				done++
			}
			continue
		}
		done++
		delete(s.waits, name)
		s.waiting -= int(n)
		l := f.locks.get(name)
		if l == nil {
			continue
		}
		kept := l.waiters()[:0]
		multi := f.multi[:0]
		for _, w := range l.waiters() {
			if w.session != s.id {
				kept = append(kept, w)
				continue
			}
			e := Event{Kind: EventWaitEnded, Name: l.name, Session: w.session, Owner: w.owner, Seq: w.seq,
				Reason: reason}
			if names := w.names(); names != nil {
				e.Name, e.ExtraNames = names[0], names[1:]
				multi = append(multi, w)
			}
			ev = append(ev, e)
		}
		clear(l.waiters()[len(kept):])
		l.setWaiters(kept)
		f.touchLock(l)
		touched = append(touched, l.name)
		// A multi-name waiter leaves all its queues at once (a queue must not keep part of one): its
		// other names are then no longer waited for, or waited for by fewer of the session's waiters.
		for i := range multi {
			f.dropMultiWaiter(&multi[i])
			touched = append(touched, multi[i].names()...)
		}
		clear(multi)
		f.multi = multi[:0]
	}
	if limit < 0 {
		f.names = s.holds.sortedNames(f.names)
		q := sortedQueue(f.names)
		holdQ = &q
	} else {
		holdQ = &s.ending.holdQ
	}
	for done != limit {
		name, more := holdQ.next()
		if !more {
			break
		}
		l := f.locks.get(name)
		if l == nil || !s.holds.has(l) {
			if f.k.runCountsGone && limit > 0 {
				done++
			}
			continue
		}
		done++
		ended := false
		var group []string // a multi-name hold's names (a mutex has one hold)
		for i := 0; i < len(l.holds()); {
			if l.holds()[i].session != s.id {
				i++
				continue
			}
			group = l.holds()[i].names()
			ev = f.endHold(l, i, reason, ev) // hold i is gone: i is the next one now
			ended = true
		}
		if ended {
			ev = f.delay(l, index, delay, ev)
		}
		for _, n := range group {
			if m := f.locks.get(n); m != nil {
				ev = f.delay(m, index, delay, ev)
			}
		}
		touched = append(touched, group...)
		ev = f.settle(l, index, ended, ev)
		s.holds.del(l.name) // normally gone already (unindexHold); a run must not meet it again
	}
	if limit < 0 {
		clear(f.names)
	}
	slices.Sort(touched)
	touched = slices.Compact(touched)
	for _, name := range touched {
		if l := f.locks.get(name); l != nil {
			ev = f.settle(l, index, false, ev)
		}
	}
	clear(touched)
	f.touched = touched[:0]
	if limit >= 0 && (len(s.waits) > 0 || s.holds.len() > 0) {
		return Result{Status: SessionClosed, Session: s.id}, ev
	}
	clear(s.waits)
	s.waiting = 0
	delete(f.sessions, s.id)
	f.dirtySessions[s.id] = struct{}{}
	ev = append(ev, Event{Kind: EventSessionEnded, Session: s.id, Reason: reason})
	return Result{Status: SessionClosed, Session: s.id}, ev
}

// delay puts l in its lock-delay started at index (once per entry), when delay > 0.
func (f *FSM) delay(l *lock, index, delay uint64, ev []Event) []Event {
	if delay == 0 || (l.delayed && l.delayToken() == index) {
		return ev
	}
	l.delayed = true
	l.setDelayToken(index)
	f.dirtyLocks[l.name] = struct{}{}
	return append(ev, Event{Kind: EventDelayed, Name: l.name, Token: index, DelayMillis: delay})
}

// sortedKeys appends m's keys to dst[:0] and sorts them.
func sortedKeys[V any](dst []string, m map[string]V) []string {
	dst = dst[:0]
	for k := range m {
		dst = append(dst, k)
	}
	slices.Sort(dst)
	return dst
}
