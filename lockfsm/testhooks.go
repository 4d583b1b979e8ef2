package lockfsm

// TestHooks are planted bugs that the fault checker turns on to show that it
// catches them. Tests only: production code must never call SetTestHooks.
type TestHooks struct {
	// GrantWhileHeld: an acquire is granted even when another owner holds
	// the name (the holder check is skipped).
	GrantWhileHeld bool
}

var testHookGrantWhileHeld = false

// SetTestHooks plants the bugs in h process-wide and returns a function that
// restores the previous hooks. Tests only; not safe to call while an FSM is
// applying commands.
func SetTestHooks(h TestHooks) (restore func()) {
	prev := testHookGrantWhileHeld
	testHookGrantWhileHeld = h.GrantWhileHeld
	return func() { testHookGrantWhileHeld = prev }
}
