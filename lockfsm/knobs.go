package lockfsm

// knobs are bugs planted in one FSM's lock rules on purpose, to show that the invariant checkers (this
// package's fuzz checker, the fault checker outside it) catch them. Each knob breaks one promise. The zero
// value is the correct state machine, and production code never sets a knob: lockfsm's own tests set them
// on their FSM, other packages only through Options.Plant, which exists only in builds with the
// lockraft_planted tag (planted.go).
//
// The knobs are fixed when the FSM is built (Open, or a test's in-memory FSM) and only read after that, so
// any goroutine that may use the FSM may read them. A rule that is a method of lock takes the FSM's knobs
// as a parameter: a lock record carries no pointer to them. Decoding a record checks it against the
// correct rules, whatever the knobs.
type knobs struct {
	// grantWhileHeld (S1): an exclusive acquire (mutex, election campaign, write side of a read-write
	// lock) is granted even when another owner holds the name; the holder check is skipped and the old
	// holder overwritten: two holders, or two leaders.
	grantWhileHeld bool
	// readerBesideWriter (S1): a read acquire fits while a writer holds.
	readerBesideWriter bool
	// permitOverN (S1): a semaphore grants one permit more than its limit.
	permitOverN bool
	// partialMulti (S1): a multi-name grant takes only its first name.
	partialMulti bool
	// grantTail (FIFO): a release grants the queue's tail instead of its head.
	grantTail bool
	// enqueueToken (S2): a grant from a queue is stamped with the index that enqueued it, not the index
	// that granted it, so a token can go backwards.
	enqueueToken bool
	// semaphoreBarge (FIFO): a smaller, later semaphore request overtakes a head that does not fit.
	semaphoreBarge bool
	// noSettleOnCancel (L4): removing a cancelled waiter grants nobody behind it, though it made room.
	noSettleOnCancel bool
	// snapshotNoValue (S7): the lock records this FSM writes (snapshots and its bbolt file) drop its
	// waiters' election values, so a replica restored from them diverges.
	snapshotNoValue bool
	// keepAliases (S7): the state keeps a command's strings as decoded, pointing into the entry's bytes,
	// so a replica whose entry buffers change after they are applied diverges.
	keepAliases bool
	// grantEnding (S4): a queue grants its head even when that waiter's session is ending (ending.go).
	grantEnding bool
	// runCountsGone (S7): a run of a session's end counts the names it meets that the session no longer
	// waits for or holds, so a replica that rebuilt its run queue (restart, snapshot) ends other names in
	// an entry than one that kept it.
	runCountsGone bool
}
