// Package lockfsm is lockraft's deterministic lock state machine: committed raft entries go in, a lock
// table, a result per entry and events come out. It keeps every promise about what the lock table may
// look like: mutual exclusion (S1), fencing tokens (S2), no phantom holders or waiters (S4), at-most-once
// commands (S6), determinism (S7), FIFO fairness (L2) and one-entry handoff (L4).
//
// # Rules
//
//   - Sessions. KindOpenSession creates a session whose id is the entry's index. Every hold and waiter
//     belongs to a session. Closing it (KindCloseSession) or expiring it (KindExpireSession, leader-proposed)
//     removes all its waiters, then releases all its holds whatever their counts and grants each freed name
//     to its next waiter, in that one apply; events come in sorted name order.
//   - Acquire. A free name is granted with token = the entry's index and hold count 1. The same
//     (Session, Owner) acquiring again increments the count and keeps the token (ErrTooManyHolds beyond
//     MaxHolds). Held by someone else: a try (Wait false) fails with ErrLocked naming the holder and never
//     queues; a waiting acquire joins the name's FIFO queue (ErrAlreadyWaiting if that owner is queued).
//   - Release by the holder drops one level; at zero the name goes to the queue head in the same apply,
//     token = the release's index. Anyone else gets ErrNotHolder.
//   - Cancel(Target) undoes the acquire with Seq Target: removes it from its queue, or gives back the hold
//     level it added (a full release and handoff if it was the last), or, if that acquire was never applied,
//     stores a tombstone so a late copy is a duplicate that returns ErrCancelled. A granted acquire is found
//     even after its result was acknowledged away: each hold records the Seq of the acquire that created it
//     (LockInfo.GrantSeq), so a cancel applied just after a queue handoff still releases (S4).
//   - Leases. KindExpireLease(Name, Token) ends the hold with that token; any other token is stale: a no-op.
//   - Lock-delay. An expiry with LockDelayMillis > 0 leaves each freed name delayed: granted to nobody,
//     waiters stay queued, tries fail with ErrLocked, until KindLiftDelay(Name, Token) with the delaying
//     index (stale lifts are no-ops).
//   - Invalid names (empty, > MaxNameLen bytes, not UTF-8) and owners (empty, > MaxOwnerLen bytes), and the
//     reserved Mode/Permits/ExtraNames fields, are deterministic errors that change nothing.
//
// # At most once and its memory bound
//
// Acquire, Release and Cancel carry (Session, Seq, AckedBelow). A session retains the results of its
// applied sequence numbers that are >= the highest AckedBelow it sent, at most MaxRetainedResults of them
// (the lowest are evicted first). A retained Seq returns its stored result with Duplicate set and changes
// nothing; a Seq below the window gets ErrStaleSequence. The stored result of a queued acquire is updated
// when it is granted or cancelled, so a retry reports the final outcome. Memory: sessions ×
// MaxRetainedResults × about 64 bytes at worst.
//
// # Determinism
//
// Apply never reads a clock, draws a random number, starts a goroutine or lets map order reach an output:
// time only enters as values in leader-proposed entries. The same entries applied to the same state give
// the same results, events and WriteSnapshot bytes on every replica.
//
// # Persistence
//
// State lives in memory and in its own bbolt file. Commit writes the records changed since the last Commit
// and the applied index in one transaction; the raft log is the durability source, so the node commits in
// batches and after a crash replays the entries after DurableIndex. Snapshots are a canonical, checksummed
// stream; Restore verifies all of it before replacing anything.
//
// # Threading
//
// An FSM is not safe for concurrent use: the node loop is its only caller. Events and inspection results
// may be kept by the caller; their strings are never modified.
package lockfsm
