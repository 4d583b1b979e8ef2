//go:build lockraft_planted

package lockfsm

// Planted are bugs planted in an FSM's lock rules on purpose, for checkers outside this package (the fault
// checker's self-tests) to show that they catch them. This file is built only with the lockraft_planted
// tag: without it, no FSM can have a planted bug. Each field breaks S1, the safety of holds.
type Planted struct {
	// GrantWhileHeld: an exclusive acquire (mutex, election campaign, write side of a read-write lock) is
	// granted even when another owner holds the name; the holder check is skipped and the old holder
	// overwritten: two holders, or two leaders.
	GrantWhileHeld bool
	// ReaderBesideWriter: a read acquire is granted while a writer holds.
	ReaderBesideWriter bool
	// PermitOverN: a semaphore grants one permit more than its limit.
	PermitOverN bool
	// PartialMultiGrant: a multi-name grant takes only its first name.
	PartialMultiGrant bool
}

// Plant sets the four bugs of p (each on or off) in the FSMs that Open builds with o. An FSM already open
// is not affected.
func (o *Options) Plant(p Planted) {
	o.knobs.grantWhileHeld = p.GrantWhileHeld
	o.knobs.readerBesideWriter = p.ReaderBesideWriter
	o.knobs.permitOverN = p.PermitOverN
	o.knobs.partialMulti = p.PartialMultiGrant
}
