package lockfsm

import "slices"

// A session that ends holding or waiting for many names ends over several entries, so that no single
// entry holds every replica's apply loop for seconds (a session holding a million locks took 20 s in one
// entry, long enough for every other member's keepalives to go unanswered).
//
// The close or expiry (version 3, with Limit: the run size) marks the session ending and ends its first
// run of names; the leader then proposes KindEndSessionRun entries, each ending the next run, until the
// last one removes the session. While it ends:
//   - its own commands get ErrNoSession, as after an end in one entry;
//   - its waiters are never granted: a queue whose head is one of them waits for the run that removes it,
//     and the runs take waits before holds, so that wait is over within the first runs;
//   - its holds stay held until their run (or their lease) ends them, and are fenced as before: a name
//     is granted again only after the run that released it, with a newer token.
//
// Every replica ends the same names in the same entry: a run takes, in sorted order, the names the
// session still waits for and then those it still holds (endRun), and both sets only shrink while it
// ends. The order is kept in memory (the queues below) and rebuilt from the sets after a restart or a
// snapshot, which gives the same order.

// DefaultSessionEndRun is the run size a node proposes: the names one entry of a session's end takes.
// About a millisecond of apply on this project's reference machine, alone (BenchmarkEndSession: a
// million names in 1,954 entries, 1.3–2.0 s of apply in all). It was 4,096 (about 10 ms alone, 30 or
// more under load): with four replicas on two cores a follower fell a few runs behind and applied them in
// one turn of its loop, so Lock+Unlock through it while a million-lock session ended had p99 194–270 ms
// and max 0.8–1.5 s; at 512, p99 70–102 ms and max 179–386 ms, with the end taking as long
// (bench/cmd/scalelocks, step 7).
const DefaultSessionEndRun = 512

// ending is the state of a session that ends over several entries. reason and delay are persisted (the
// session record, version 4); the queues are derived.
type ending struct {
	reason Reason
	delay  uint64
	// waitQ and holdQ are the names left to end, built when a run first needs them.
	waitQ, holdQ nameQueue
	built        bool
}

// queue builds the run queues of s from what it waits for and holds, once. The names are not sorted
// all at once (0.7 s at a million, in the first run's entry): a queue sorts a bounded share with each name
// it hands out (nameQueue).
func (e *ending) queue(s *session) {
	if e.built {
		return
	}
	e.built = true
	e.waitQ = unsortedQueue(s.waits)
	e.holdQ = nameQueue{a: s.holds.names(make([]string, 0, s.holds.len()))}
}

// runLimit is the run size a close or expiry asks for: 0 (end the whole session now) unless it is of
// version 3 or later (or built in memory, version 0) and sets Limit.
func runLimit(c *Command) int {
	if c.Version != 0 && c.Version < 3 {
		return 0
	}
	return int(c.Limit)
}

// endSessionRun applies KindEndSessionRun: the next run of at most Limit (at least 1) names of the ending
// session Session. A run for a session that is not ending, or gone, is a no-op (NotFound), so a leader
// may propose one twice.
func (f *FSM) endSessionRun(index uint64, c *Command, ev []Event) (Result, []Event) {
	s := f.sessions[c.Session]
	if s == nil || s.ending == nil {
		return Result{Status: NotFound}, ev
	}
	return f.endRun(index, s, s.ending.reason, s.ending.delay, max(int(c.Limit), 1), ev)
}

// Ending returns the sessions ending over several entries, sorted: the leader proposes their next runs.
func (f *FSM) Ending() []uint64 {
	var out []uint64
	for id, s := range f.sessions {
		if s.ending != nil {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// SessionEnding reports whether session id is ending over several entries.
func (f *FSM) SessionEnding(id uint64) bool {
	s := f.sessions[id]
	return s != nil && s.ending != nil
}

// endingBlocks reports whether w, the head of a queue, belongs to an ending session: it is not granted,
// and the queue waits for the run that removes it.
func (f *FSM) endingBlocks(w *waiter) bool {
	s := f.sessions[w.session]
	return s != nil && s.ending != nil && !f.k.grantEnding
}
