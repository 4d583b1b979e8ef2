package lockfsm

import (
	"fmt"
	"slices"
)

// checker is the tests' own model of the lock table, built only from results and events (never from the
// table), and the invariants checked against it and against the table after every applied entry:
//
//   - S1: a mutex or election has one holder, a read-write lock a writer alone (or beside its own read
//     side) or readers, a semaphore at most its permits; in the model (from events) and in the table; a
//     multi-name hold is on every one of its names.
//   - S2: a writer's, mutex's, election's or multi-name grant's token is strictly above every earlier
//     grant of each of its names; a reader's or permit's at least every earlier one.
//   - L2 (FIFO): a grant from a queue goes to the model's first waiter on each of its names; a grant not
//     from a queue happens only when nobody waits (or is a downgrade); the table's queues equal the
//     model's.
//   - L4: after every entry no queue's first waiter could be granted (nothing left for later).
//   - S4: no hold or waiter of an ended session, no grant to an ending one (a waiter of it may wait first in a
//     queue it could be granted, L4's one exception); a cancel of the acquire that created a hold gives back a
//     level; grant seqs as the model says.
//   - S6: a duplicate emits nothing.
//   - Elections: exactly one Leader event per election whose leader or value changed, none otherwise.
type checker struct {
	ended     map[uint64]bool
	ending    map[uint64]bool // sessions ending over several entries
	lastToken map[string]uint64
	holds     map[string][]mhold
	queues    map[string][]mwait
	leaders   map[string]LeaderInfo // elections with a leader before this entry
}

type mhold struct {
	session  uint64
	owner    string
	token    uint64
	grantSeq uint64
	mode     Mode
	permits  uint32
	names    []string
}

type mwait struct {
	session  uint64
	owner    string
	seq      uint64
	enqueued uint64
	mode     Mode
	permits  uint32
	names    []string
}

func newChecker() *checker {
	return &checker{ended: map[uint64]bool{}, ending: map[uint64]bool{}, lastToken: map[string]uint64{}, holds: map[string][]mhold{},
		queues: map[string][]mwait{}, leaders: map[string]LeaderInfo{}}
}

func evNames(e *Event) []string { return append([]string{e.Name}, e.ExtraNames...) }

func cmdNames(c *Command) []string { return append([]string{c.Name}, c.ExtraNames...) }

// exclusive: a grant that must be alone (mutex, election, writer, multi-name); the rest share.
func (h *mhold) exclusive() bool { return h.mode == ModeExclusive && h.permits == 0 }

// step checks one applied command: its result and events against the model, then the table.
func (k *checker) step(f *FSM, index uint64, c *Command, r Result, ev []Event) error {
	if r.Duplicate && len(ev) > 0 {
		return fmt.Errorf("index %d: duplicate emitted %d events", index, len(ev))
	}
	if r.Status == Queued && !r.Duplicate {
		w := mwait{session: c.Session, owner: c.Owner, seq: c.Seq, enqueued: index, mode: c.Mode}
		if c.Primitive == PrimSemaphore {
			w.permits = max(c.Permits, 1)
		}
		names := cmdNames(c)
		if len(names) > 1 {
			w.names = names
		}
		for _, n := range names {
			k.queues[n] = append(k.queues[n], w)
		}
	}
	// S4: a cancel of the acquire that created a hold gives back a level, whether or not that acquire's
	// result is still retained (it may have been queued, acknowledged and then granted).
	if c.Kind == KindCancel && !r.Duplicate && r.Err == nil && c.Target != 0 {
		for _, h := range k.holds[c.Name] {
			if h.session == c.Session && h.owner == c.Owner && h.grantSeq == c.Target {
				if r.Status != Cancelled {
					return fmt.Errorf("index %d: cancel of seq %d, which created a hold of %s, returned %v",
						index, c.Target, c.Name, r.Status)
				}
				k.setGrantSeq(c.Name, h, 0)
				break
			}
		}
	}
	var leaderEvents map[string][]Event
	for i := range ev {
		if ev[i].Kind == EventLeader && leaderEvents == nil {
			leaderEvents = map[string][]Event{}
		}
		if err := k.event(index, &ev[i], leaderEvents); err != nil {
			return err
		}
	}
	if got, want := f.Stats(), scanStats(f); got != want {
		return fmt.Errorf("index %d: Stats %+v, a pass over the table %+v", index, got, want)
	}
	for id, s := range f.sessions {
		n := 0
		for _, c := range s.waits {
			n += int(c)
		}
		if s.waiting != n {
			return fmt.Errorf("index %d: session %d counts %d waits, its names hold %d", index, id, s.waiting, n)
		}
	}
	table := tableOf(f)
	if err := k.checkLeaders(f, table, index, leaderEvents); err != nil {
		return err
	}
	if err := k.checkTableOf(table); err != nil {
		return fmt.Errorf("index %d (%v): %w", index, c.Kind, err)
	}
	return nil
}

// setGrantSeq sets the model's grant seq of hold h of name (on all its names).
func (k *checker) setGrantSeq(name string, h mhold, seq uint64) {
	names := h.names
	if names == nil {
		names = []string{name}
	}
	for _, n := range names {
		for i := range k.holds[n] {
			if x := &k.holds[n][i]; x.session == h.session && x.owner == h.owner && x.token == h.token {
				x.grantSeq = seq
			}
		}
	}
}

func (k *checker) event(index uint64, e *Event, leaders map[string][]Event) error {
	names := evNames(e)
	switch e.Kind {
	case EventGranted:
		if k.ended[e.Session] || k.ending[e.Session] {
			return fmt.Errorf("index %d: grant to ended or ending session %d", index, e.Session)
		}
		h := mhold{session: e.Session, owner: e.Owner, token: e.Token, grantSeq: e.Seq, mode: e.Mode,
			permits: e.Permits}
		if len(names) > 1 {
			h.names = names
		}
		for _, n := range names {
			// S2.
			if last := k.lastToken[n]; (h.exclusive() && e.Token <= last) || e.Token < last {
				return fmt.Errorf("index %d: S2: token of %s went from %d to %d (%v)", index, n, last, e.Token, e.Mode)
			}
			k.lastToken[n] = e.Token
			q := k.queues[n]
			if e.FromQueue {
				// L2: the first waiter, on every one of its names.
				if len(q) == 0 || q[0].session != e.Session || q[0].seq != e.Seq || q[0].owner != e.Owner {
					return fmt.Errorf("index %d: FIFO violated on %s: granted %d/%s seq %d, model queue %v",
						index, n, e.Session, e.Owner, e.Seq, q)
				}
				k.queues[n] = q[1:]
			} else if len(q) > 0 && !(e.Mode == ModeShared && k.holdsWrite(n, e.Session, e.Owner)) {
				return fmt.Errorf("index %d: FIFO violated on %s: %d/%s granted ahead of waiters %v",
					index, n, e.Session, e.Owner, q)
			}
			k.holds[n] = append(k.holds[n], h)
			if err := exclusion(n, k.holds[n], 0); err != nil {
				return fmt.Errorf("index %d: model: %w", index, err)
			}
		}
	case EventReleased:
		for _, n := range names {
			i := slices.IndexFunc(k.holds[n], func(h mhold) bool {
				return h.session == e.Session && h.owner == e.Owner && h.token == e.Token && h.mode == e.Mode
			})
			if i < 0 {
				return fmt.Errorf("index %d: released unknown hold %d/%s token %d of %s", index, e.Session,
					e.Owner, e.Token, n)
			}
			k.holds[n] = slices.Delete(k.holds[n], i, i+1)
		}
	case EventWaitEnded:
		for _, n := range names {
			i := slices.IndexFunc(k.queues[n], func(w mwait) bool { return w.session == e.Session && w.seq == e.Seq })
			if i < 0 {
				return fmt.Errorf("index %d: wait ended for unknown waiter %d seq %d on %s", index, e.Session, e.Seq, n)
			}
			k.queues[n] = slices.Delete(k.queues[n], i, i+1)
		}
	case EventSessionEnding:
		k.ending[e.Session] = true
	case EventSessionEnded:
		k.ended[e.Session] = true
	case EventLeader:
		leaders[e.Name] = append(leaders[e.Name], *e)
	}
	return nil
}

func (k *checker) holdsWrite(name string, session uint64, owner string) bool {
	for _, h := range k.holds[name] {
		if h.session == session && h.owner == owner && h.mode == ModeExclusive {
			return true
		}
	}
	return false
}

// exclusion checks S1 on one name's holds (limit: a semaphore's permits, 0 if unknown here).
func exclusion(name string, holds []mhold, limit uint32) error {
	var used uint32
	var writer *mhold
	for i := range holds {
		h := &holds[i]
		used += h.permits
		if h.exclusive() {
			if writer != nil {
				return fmt.Errorf("S1: %s held exclusively by %d/%s and %d/%s", name, writer.session, writer.owner,
					h.session, h.owner)
			}
			writer = h
		}
	}
	if writer != nil {
		for _, h := range holds {
			if h.mode == ModeShared && (h.session != writer.session || h.owner != writer.owner) {
				return fmt.Errorf("S1: %s: reader %d/%s beside writer %d/%s", name, h.session, h.owner,
					writer.session, writer.owner)
			}
			if h.permits != 0 {
				return fmt.Errorf("S1: %s: permit holder beside exclusive holder", name)
			}
		}
	}
	if limit != 0 && used > limit {
		return fmt.Errorf("S1: %s: %d permits in use, limit %d", name, used, limit)
	}
	return nil
}

// table is the lock table as the checker sees it: f.Locks() by name, in name order.
type table struct {
	locks  []LockInfo
	byName map[string]*LockInfo
}

func tableOf(f *FSM) table {
	t := table{locks: f.Locks(), byName: map[string]*LockInfo{}}
	for i := range t.locks {
		t.byName[t.locks[i].Name] = &t.locks[i]
	}
	return t
}

// checkLeaders: one Leader event per election whose leader or value changed in this entry, matching it.
func (k *checker) checkLeaders(f *FSM, t table, index uint64, events map[string][]Event) error {
	names := map[string]bool{}
	for n := range k.leaders {
		names[n] = true
	}
	for n := range events {
		names[n] = true
	}
	for _, l := range t.locks {
		if l.Primitive == PrimElection {
			names[l.Name] = true
		}
	}
	for n := range names {
		before, was := k.leaders[n]
		now, is := f.Leader(n)
		changed := was != is || before != now
		evs := events[n]
		if !changed && len(evs) != 0 || changed && len(evs) != 1 {
			return fmt.Errorf("index %d: election %s: leader %+v→%+v with %d Leader events", index, n, before, now, len(evs))
		}
		if changed {
			e := evs[0]
			if got := (LeaderInfo{Holder: Holder{e.Session, e.Owner}, Token: e.Token, Value: e.Value}); got != now {
				return fmt.Errorf("index %d: election %s: event %+v, table %+v", index, n, got, now)
			}
		}
		if is {
			k.leaders[n] = now
		} else {
			delete(k.leaders, n)
		}
	}
	return nil
}

// checkTable checks the table itself, and against the model.
func (k *checker) checkTable(f *FSM) error { return k.checkTableOf(tableOf(f)) }

func (k *checker) checkTableOf(t table) error {
	seen := map[string]bool{}
	for _, l := range t.locks {
		seen[l.Name] = true
		var th []mhold
		for _, h := range l.Holds {
			th = append(th, mhold{session: h.Session, owner: h.Owner, token: h.Token, grantSeq: h.GrantSeq,
				mode: h.Mode, permits: h.Permits, names: h.Names})
			if k.ended[h.Session] {
				return fmt.Errorf("lock %s: held by ended session %d", l.Name, h.Session)
			}
			if h.HoldCount == 0 {
				return fmt.Errorf("lock %s: hold with count 0", l.Name)
			}
			// S1: a multi-name hold is on every one of its names.
			for _, n := range h.Names {
				m, ok := t.byName[n]
				if !ok || !slices.ContainsFunc(m.Holds, func(x HoldInfo) bool {
					return x.Session == h.Session && x.Owner == h.Owner && x.Token == h.Token &&
						x.HoldCount == h.HoldCount && x.GrantSeq == h.GrantSeq && slices.Equal(x.Names, h.Names)
				}) {
					return fmt.Errorf("S1: multi-name hold %v of %d/%s is missing on %s", h.Names, h.Session, h.Owner, n)
				}
			}
		}
		if err := exclusion(l.Name, th, l.Permits); err != nil {
			return fmt.Errorf("table: %w", err)
		}
		if l.Primitive == PrimSemaphore && l.PermitsInUse > l.Permits {
			return fmt.Errorf("S1: %s: %d permits in use, limit %d", l.Name, l.PermitsInUse, l.Permits)
		}
		if l.Holder.Session == 0 && !l.Delayed && len(l.Waiters) == 0 {
			return fmt.Errorf("lock %s: empty entry left in the table", l.Name)
		}
		if !slices.EqualFunc(th, k.holds[l.Name], eqHold) {
			return fmt.Errorf("lock %s: holds %v, model %v", l.Name, th, k.holds[l.Name])
		}
		var tw []mwait
		for _, w := range l.Waiters {
			if k.ended[w.Session] {
				return fmt.Errorf("lock %s: waiter of ended session %d", l.Name, w.Session)
			}
			tw = append(tw, mwait{session: w.Session, owner: w.Owner, seq: w.Seq, enqueued: w.Enqueued, mode: w.Mode,
				permits: w.Permits, names: w.Names})
		}
		if !slices.EqualFunc(tw, k.queues[l.Name], eqWait) {
			return fmt.Errorf("lock %s: queue %v, model %v", l.Name, tw, k.queues[l.Name])
		}
		// L4: the first waiter could not be granted now.
		if !l.Delayed && len(l.Waiters) > 0 && !k.ending[l.Waiters[0].Session] && grantable(t, l, l.Waiters[0]) {
			return fmt.Errorf("L4: lock %s: its first waiter %d/%s seq %d could be granted but waits", l.Name,
				l.Waiters[0].Session, l.Waiters[0].Owner, l.Waiters[0].Seq)
		}
	}
	for name, q := range k.queues {
		if len(q) > 0 && !seen[name] {
			return fmt.Errorf("lock %s: model has waiters %v, table has none", name, q)
		}
	}
	for name, h := range k.holds {
		if len(h) > 0 && !seen[name] {
			return fmt.Errorf("lock %s: model has holds %v, table has none", name, h)
		}
	}
	return nil
}

func eqHold(a, b mhold) bool {
	return a.session == b.session && a.owner == b.owner && a.token == b.token && a.grantSeq == b.grantSeq &&
		a.mode == b.mode && a.permits == b.permits && slices.Equal(a.names, b.names)
}

func eqWait(a, b mwait) bool {
	return a.session == b.session && a.owner == b.owner && a.seq == b.seq && a.enqueued == b.enqueued &&
		a.mode == b.mode && a.permits == b.permits && slices.Equal(a.names, b.names)
}

// grantable says, from the table alone, whether w (first in l's queue) could be granted now.
func grantable(t table, l LockInfo, w WaiterInfo) bool {
	if w.Names != nil {
		for _, n := range w.Names {
			m, ok := t.byName[n]
			if !ok || m.Delayed || len(m.Holds) > 0 || len(m.Waiters) == 0 || m.Waiters[0].Session != w.Session ||
				m.Waiters[0].Seq != w.Seq {
				return false
			}
		}
		return true
	}
	switch l.Primitive {
	case PrimRW:
		if w.Mode == ModeShared {
			return !slices.ContainsFunc(l.Holds, func(h HoldInfo) bool { return h.Mode == ModeExclusive })
		}
	case PrimSemaphore:
		return l.PermitsInUse+w.Permits <= l.Permits
	}
	return len(l.Holds) == 0
}
