// Package lockfsm is lockraft's deterministic lock state machine: committed raft entries go in, a lock
// table, a result per entry and events come out. It keeps every promise about what the lock table may
// look like: mutual exclusion (S1), fencing tokens (S2), no phantom holders or waiters (S4), at-most-once
// commands (S6), determinism (S7), FIFO fairness (L2) and one-entry handoff (L4), for every primitive of
// the catalogue: mutex, read-write lock, counting semaphore, leader election and atomic multi-name mutex.
//
// # Rules common to every primitive
//
//   - Sessions. KindOpenSession creates a session whose id is the entry's index. Every hold and waiter
//     belongs to a session. Closing it (KindCloseSession) or expiring it (KindExpireSession, leader-proposed)
//     removes all its waiters, then ends all its holds whatever their counts and grants each freed name
//     to its next waiters, in that one apply; events come in sorted name order. With a run limit
//     (version 3) a session with more names than the limit ends over several entries instead
//     (ending.go): it is marked ending, its commands are refused, its waiters are never granted, and the
//     leader's KindEndSessionRun entries each end the next run of its names in the same order.
//   - Names and kinds. A name's primitive (Command.Primitive) is fixed by the acquire that puts it in the
//     table and lasts while it has a hold, a waiter or a lock-delay; then the name is forgotten (a
//     semaphore's limit with it). An acquire, release or proclaim of another primitive on it gets
//     ErrWrongKind; fields its primitive does not have get errUnsupported. Nothing changes on either.
//   - Fairness. Each name has one FIFO queue. A new acquire is granted at once only if the name is not
//     delayed, nobody waits on it (no barging) and the new hold fits beside the current ones; a try (Wait
//     false) otherwise fails with ErrLocked and never queues; a waiting acquire joins the queue
//     (ErrAlreadyWaiting if that owner is queued on the name). Whenever room appears — a release, a
//     cancel, an expiry, a lift, a waiter leaving — the queue is granted from its head, in that same
//     entry, for as long as the head fits; the head is never overtaken. After every entry no queue's head
//     could be granted.
//   - Tokens. A new hold's token is the index of the entry that granted it; a reentrant level keeps it. So
//     an exclusive grant (mutex, election, writer, multi-name) is strictly above every earlier grant of its
//     names, and a shared one (reader, permits) at least every earlier one: readers or permits granted in
//     one entry share a token.
//   - Release by the holder drops one level; at zero the hold ends and the name's queue is granted in
//     the same apply. Anyone else gets ErrNotHolder. For every primitive but the mutex a nonzero
//     Command.Token must be the hold's (a stale handle cannot release a later hold).
//   - Cancel(Target) undoes the acquire with Seq Target: removes it from its queue (every queue of a
//     multi-name acquire), or gives back the hold level it added (a full release and handoff if it was the
//     last), or, if that acquire was never applied, stores a tombstone so a late copy is a duplicate that
//     returns errCancelled. A granted acquire is found even after its result was acknowledged away: each
//     hold records the Seq of the acquire that created it (HoldInfo.GrantSeq), so a cancel applied just
//     after a queue handoff still releases (S4).
//   - Leases. KindExpireLease(Name, Token) ends the hold with that token; with Session and Owner set, only
//     theirs (readers and permits may share a token). Any other is stale: a no-op.
//   - Lock-delay. An expiry with LockDelayMillis > 0 leaves each name it freed delayed: no new hold of
//     any kind (holds that remain stay), waiters stay queued, tries fail with ErrLocked, until
//     KindLiftDelay(Name, Token) with the delaying index (stale lifts are no-ops).
//   - Invalid names (empty, > MaxNameLen bytes, not UTF-8) and owners (empty, > MaxOwnerLen bytes) are
//     deterministic errors that change nothing.
//
// # Mutex (PrimMutex)
//
// One holder. The same (Session, Owner) acquiring again adds a level and keeps the token (ErrTooManyHolds
// beyond MaxHolds).
//
// # Read-write lock (PrimRW, Mode)
//
// Readers (ModeShared) or one writer (ModeExclusive). The queue is granted from its head: a writer alone
// once no one holds; consecutive readers together while no writer holds; so a writer waits for the
// readers ahead of it and readers arriving after a waiting writer wait behind it. Each owner is reentrant
// in each mode (MaxHolds). A writer's read acquire is granted at once, ahead of the queue (downgrade: take
// read, then release write); a reader's write acquire is ErrUpgrade, try or wait, since it could only wait
// for itself. Release names the mode.
//
// # Counting semaphore (PrimSemaphore, Limit, Permits)
//
// Limit N (1..MaxPermits) is fixed by the acquire that creates the name (another N: ErrPermitsMismatch;
// N out of range or Permits > N: ErrBadPermits). Each acquire of k = max(Permits, 1) permits is a hold of
// its own (its own token, lease and release, found by Token), even for the same owner, and not reentrant.
// A head asking for k waits until k are free; smaller requests behind it wait too. Permits held never
// exceed N at any index. An acquire for more than N minus what the same owner already holds is
// ErrHoldConflict (it could only wait for itself).
//
// # Leader election (PrimElection, Value)
//
// A campaign is a fair, exclusive, non-reentrant acquire carrying Value (at most MaxValueLen bytes); the
// leader's token is its term, strictly increasing over the election's leaders. A campaign by the current
// leader is ErrHoldConflict. KindProclaim by the leader changes its value (a nonzero Token must be its
// term; anyone else: ErrNotHolder). Resigning is a release. Every entry that changes an election's leader
// or value emits exactly one EventLeader (after its Granted and Released events): Session 0 when nobody
// leads. FSM.Leader reads the current leader.
//
// # Atomic multi-name mutex (PrimMutex with ExtraNames)
//
// Name and ExtraNames (at most MaxMultiNames in all, none repeated: ErrTooManyNames, ErrDuplicateName),
// all mutexes (ErrWrongKind otherwise), taken in one entry or not at all: one hold with one token on every
// name, granted at once only if every name is free, undelayed and unqueued, otherwise queued in every
// name's queue in that one entry. It holds nothing while it waits, and is granted in the first apply in
// which it heads every one of its queues and all its names are free and undelayed. While it heads a
// queue, later requests on that name, single-name or not, wait behind it even if the name is free.
// Releasing, cancelling or expiring it ends it on every name. The same owner acquiring the same set again
// adds a level; any other overlap with what that owner holds is ErrHoldConflict. The deadlock freedom
// argument is in multi.go.
//
// # Versions
//
// Commands carry a version byte (see command.go). Version-1 entries apply as they did when version 1 was
// the newest; a malformed entry is errBadCommand and a no-op everywhere; an entry of a newer format is
// ErrNewerFormat, is not applied, and stops Apply (Halted) so that this replica never diverges from
// upgraded ones. Lock records (version 3; version 2 still read), session records (version 3, and 4 for a
// session that is ending; versions 2 and 3 still read) and snapshots (version 3; version 2 still restored)
// have versions of their own.
//
// # At most once and its memory bound
//
// Acquire, Release and Cancel carry (Session, Seq, AckedBelow). A session retains the results of its
// applied sequence numbers that are >= the highest AckedBelow it sent, at most maxRetainedResults of them
// (the lowest are evicted first). A retained Seq returns its stored result with Duplicate set and changes
// nothing; a Seq below the window gets errStaleSequence. The stored result of a queued acquire is updated
// when it is granted or cancelled, so a retry reports the final outcome. Memory: sessions ×
// maxRetainedResults × about 64 bytes at worst.
//
// # Determinism
//
// Apply never reads a clock, draws a random number, starts a goroutine or lets map order reach an output:
// time only enters as values in leader-proposed entries. The same entries applied to the same state give
// the same results, events and WriteSnapshot bytes on every replica.
//
// # Persistence
//
// State lives in memory and in its own bbolt file. commit writes the records changed since the last commit
// and the applied index in one transaction; the raft log is the durability source, so the node commits in
// batches and after a crash replays the entries after DurableIndex. Snapshots are a canonical, checksummed
// stream; Restore verifies all of it before replacing anything.
//
// # Threading
//
// An FSM is not safe for concurrent use: the node loop is its only caller. Events and inspection results
// may be kept by the caller; their strings are never modified.
package lockfsm
