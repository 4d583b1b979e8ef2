package lockfsm

// TestHooks are planted bugs that the fault checker turns on to show that it
// catches them. Tests only: production code must never call SetTestHooks.
type TestHooks struct {
	// GrantWhileHeld: an exclusive acquire (mutex, election campaign, write
	// side of a read-write lock) is granted even when another owner holds
	// the name (the holder check is skipped): two holders, or two leaders.
	GrantWhileHeld bool
	// ReaderBesideWriter: a read acquire is granted while a writer holds.
	ReaderBesideWriter bool
	// PermitOverN: a semaphore grants one permit more than its limit.
	PermitOverN bool
	// PartialMultiGrant: a multi-name grant takes only its first name.
	PartialMultiGrant bool
}

var (
	testHookGrantWhileHeld     = false
	testHookReaderBesideWriter = false
	testHookPermitOverN        = false
	testHookPartialMulti       = false
)

// SetTestHooks plants the bugs in h process-wide and returns a function that
// restores the previous hooks. Tests only; not safe to call while an FSM is
// applying commands.
func SetTestHooks(h TestHooks) (restore func()) {
	prev := TestHooks{GrantWhileHeld: testHookGrantWhileHeld, ReaderBesideWriter: testHookReaderBesideWriter,
		PermitOverN: testHookPermitOverN, PartialMultiGrant: testHookPartialMulti}
	set := func(h TestHooks) {
		testHookGrantWhileHeld = h.GrantWhileHeld
		testHookReaderBesideWriter = h.ReaderBesideWriter
		testHookPermitOverN = h.PermitOverN
		testHookPartialMulti = h.PartialMultiGrant
	}
	set(h)
	return func() { set(prev) }
}
