package fleet

// The version gate of a session's end in runs (lockfsm's command version 3:
// a close or expiry with a run limit, and the leader's EndSessionRun).
//
// A version of lockfsm before it stops at the first such entry
// (ErrNewerFormat) instead of diverging, but a stopped replica is a lost
// replica, so no node proposes one until every member of the raft
// configuration is known to run lockraft/0.3 or later. Until then a session
// ends in one entry, as before. Unlike the catalogue's gate nothing waits
// on it: a node that does not know yet ends the session the old way.
// Light members are not in the configuration and never propose a limit
// themselves: the leader adds it to a close it proposes for one.

// runsVersion is the first minor version that ends sessions in runs.
const runsVersion = 3

// RunsOpen reports whether every member of the configuration is known to
// end sessions in runs (loop, or any goroutine once it has opened). It
// stays open once open, as the catalogue's gate does.
func (f *Fleet) RunsOpen() bool {
	if f.runsOpen.Load() {
		return true
	}
	st, _, _ := f.membersGate(func(v string) bool { return atLeast(v, runsVersion) })
	if st != gateOpen {
		return false
	}
	f.runsOpen.Store(true)
	return true
}
