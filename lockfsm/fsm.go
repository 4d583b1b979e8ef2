package lockfsm

import (
	"errors"
	"hash/maphash"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"
)

// Limits checked deterministically at apply (see acquire.go for the catalogue's).
const (
	// MaxNameLen is the longest lock name, in bytes.
	MaxNameLen = 512
	// MaxOwnerLen is the longest owner, in bytes.
	MaxOwnerLen = 256
	// defaultMaxHolds is the reentrancy limit of an acquire whose MaxHolds is 0.
	defaultMaxHolds = 64
)

// FSM is the lock state machine: an in-memory lock table and session table, kept in a bbolt file by
// commit. It is not safe for concurrent use: one goroutine (the node loop) calls every method.
type FSM struct {
	path string
	db   *bolt.DB

	applied uint64        // last applied index, in memory
	durable atomic.Uint64 // last index whose state is committed to db (read by any goroutine)

	sessions map[uint64]*session
	locks    *lockTable

	// Records changed since the last commit. A key whose record is gone from memory is deleted by commit.
	dirtySessions map[uint64]struct{}
	dirtyLocks    map[string]struct{}
	// fresh: the names of dirtyLocks whose entry was made after the last commit while the file had no
	// record of them (newLock); one that leaves the table before the next commit is no change to the file
	// (touchLock). Nil until the first.
	fresh map[string]struct{}

	counts tableCounts // Stats' sums, kept as the table changes (stats.go)

	// For LocksPage: the batches PrepareCommit handed out that may not be written yet (those at or below
	// the durable index are dropped as it reads), and how much of a restore that replaces the file is left:
	// its commit and InstallRestore, 2 or 1 while the file is not memory's table (set by WriteRestoreFrom,
	// which runs on the caller's writer goroutine; counted down by both; see restoring).
	unwritten     []*CommitBatch
	restoreHalves atomic.Int32

	scratch Command  // Apply decodes into it; its strings alias the entry's bytes
	names   []string // scratch for sorted name lists
	touched []string // scratch for the names a session's end settles last
	multi   []waiter // scratch for the multi-name waiters a session's end takes out of their queues
	buf     []byte   // scratch for record encoding

	halted uint64 // index of an entry of a newer format: nothing at or after it is applied (see Halted)

	// Lock entries that left the table in the current apply, and those ready for reuse: a name that comes
	// and goes (the common acquire-release) costs no allocation. An entry is reused only from the next
	// apply on, so no pointer held during the apply that dropped it can see it change.
	dead, spare []*lock

	// owners is the owners cache (ownOwner); nil until the first owner is kept.
	owners *[ownerSlots]string

	k knobs // bugs planted on purpose (knobs.go); the zero value, always, outside tests
}

// maxSpareLocks bounds the entries kept for reuse (96 bytes each).
const maxSpareLocks = 64

func newState() (map[uint64]*session, *lockTable) {
	return make(map[uint64]*session), newLockTable(0)
}

// AppliedIndex returns the index of the last applied entry (in memory; see DurableIndex).
func (f *FSM) AppliedIndex() uint64 { return f.applied }

// DurableIndex returns the last index whose state is committed to the bbolt file. After a crash, Open
// returns the state as of this index and the node replays the entries after it.
func (f *FSM) DurableIndex() uint64 { return f.durable.Load() }

// Apply decodes and applies the committed entry at index, appends the events it causes to events and
// returns the result and the extended slice. It does not allocate when events has room and no new name,
// session or waiter appears.
//
// An index <= AppliedIndex returns Result{Err: errAlreadyApplied} and changes nothing. Malformed data
// returns Result{Err: errBadCommand} and still counts as applied, so a committed entry never wedges the
// node. Data of a newer format returns Result{Err: ErrNewerFormat} without being applied, and so does
// every later call until the FSM is reopened (see Halted). data is not retained.
func (f *FSM) Apply(index uint64, data []byte, events []Event) (Result, []Event) {
	if f.halted != 0 {
		return Result{Err: ErrNewerFormat}, events
	}
	if index <= f.applied {
		return Result{Err: errAlreadyApplied}, events
	}
	c := &f.scratch
	if err := decodeInto(c, data, true); err != nil {
		c.Reset()
		if errors.Is(err, ErrNewerFormat) {
			f.halted = index
			return Result{Err: ErrNewerFormat}, events
		}
		f.applied = index
		return Result{Err: errBadCommand}, events
	}
	r, events := f.apply(index, c, events)
	c.Reset() // drop the aliases into data
	return r, events
}

// ApplyCommand is Apply for an already decoded command. c is not retained. A Version above the newest
// halts the FSM as Apply does for data of a newer format.
func (f *FSM) ApplyCommand(index uint64, c *Command, events []Event) (Result, []Event) {
	if f.halted != 0 {
		return Result{Err: ErrNewerFormat}, events
	}
	if index <= f.applied {
		return Result{Err: errAlreadyApplied}, events
	}
	if c.Version > commandVersion {
		f.halted = index
		return Result{Err: ErrNewerFormat}, events
	}
	return f.apply(index, c, events)
}

// Halted returns the index of the entry of a newer format that stopped Apply, or 0. The state is that of
// AppliedIndex, below it; the entry and those after it apply after a restart with a version that knows it.
func (f *FSM) Halted() uint64 { return f.halted }

func (f *FSM) apply(index uint64, c *Command, ev []Event) (Result, []Event) {
	f.applied = index
	if len(f.dead) > 0 {
		f.recycle()
	}
	switch c.Kind {
	case KindNoop:
		return Result{Status: Noop}, ev
	case KindOpenSession:
		return f.openSession(index, c, ev)
	case KindCloseSession:
		return f.endSession(index, c, ReasonSessionClosed, 0, ev)
	case KindExpireSession:
		return f.endSession(index, c, ReasonSessionExpired, c.LockDelayMillis, ev)
	case KindAcquire, KindRelease, KindCancel, KindProclaim:
		return f.applySequenced(index, c, ev)
	case KindExpireLease:
		return f.expireLease(index, c, ev)
	case KindLiftDelay:
		return f.liftDelay(index, c, ev)
	case KindCheckpoint:
		return f.checkpoint(c, ev)
	case KindEndSessionRun:
		return f.endSessionRun(index, c, ev)
	}
	return Result{Err: errBadCommand}, ev
}

// recycle makes the entries dropped by the previous apply reusable.
func (f *FSM) recycle() {
	for i, l := range f.dead {
		if len(f.spare) < maxSpareLocks {
			*l = lock{}
			f.spare = append(f.spare, l)
		}
		f.dead[i] = nil
	}
	f.dead = f.dead[:0]
}

// applySequenced applies the per-session commands: deduplication (S6), then validation, then the rule.
// Every outcome but ErrNoSession, errStaleSequence and Duplicate is retained under (Session, Seq).
func (f *FSM) applySequenced(index uint64, c *Command, ev []Event) (Result, []Event) {
	s := f.sessions[c.Session]
	if s == nil || s.ending != nil {
		return Result{Err: ErrNoSession}, ev
	}
	if old, ok := s.lookup(c.Seq); ok {
		r := old.result()
		r.Duplicate = true
		return r, ev
	}
	if c.Seq < s.lowWater {
		return Result{Err: errStaleSequence}, ev
	}
	s.ack(c.AckedBelow, c.Seq)
	f.dirtySessions[s.id] = struct{}{}
	var r Result
	switch {
	case !validName(c.Name):
		r.Err = ErrInvalidName
	case c.Owner == "" || len(c.Owner) > MaxOwnerLen:
		r.Err = ErrInvalidOwner
	case c.Kind == KindAcquire:
		r, ev = f.acquire(index, s, c, ev)
	case c.Kind == KindRelease:
		r, ev = f.release(index, s, c, ev)
	case c.Kind == KindProclaim:
		r, ev = f.proclaim(s, c, ev)
	default:
		r, ev = f.cancel(index, s, c, ev)
	}
	s.store(toRetained(c.Seq, &r))
	return r, ev
}

func validName(n string) bool {
	return n != "" && len(n) <= MaxNameLen && utf8.ValidString(n)
}

// own returns a copy of s that does not alias an entry's bytes, for strings the state keeps: a command's
// strings may point into its entry (Apply, DecodeCommandView), and the table outlives it.
func (f *FSM) own(s string) string {
	if f.k.keepAliases {
		return s
	}
	return strings.Clone(s)
}

// ownerSlots is the size of FSM.owners: a few times the owners a table of a million locks from a fleet
// has (one default owner a node, or a thousand in bench/cmd/scalelocks), 64 KiB once a lock is taken.
// The copies it keeps may outlive their holds: at most ownerSlots of them, each at most MaxOwnerLen bytes,
// or MaxNameLen + MaxOwnerLen when it was made beside a new lock's name (ownPair): 3 MiB at worst.
const ownerSlots = 4096

// ownOwner is own for an owner: the copy made for an earlier hold or waiter of that owner when the owners
// cache still has it, so that a thousand holds of one owner keep one copy of its bytes. The cache is
// direct-mapped by the owner's hash: a slot holds the owner last owned there. Which copy a hold keeps
// changes nothing but memory.
func (f *FSM) ownOwner(o string) string {
	if c, ok := f.cachedOwner(o); ok {
		return c
	}
	return f.cacheOwner(f.own(o))
}

// cachedOwner returns the owners cache's copy of o, if it has one.
func (f *FSM) cachedOwner(o string) (string, bool) {
	if f.owners == nil || f.k.keepAliases {
		return "", false
	}
	c := f.owners[maphash.String(tableSeed, o)&(ownerSlots-1)]
	return c, c == o
}

// cacheOwner puts o, a copy the state may keep, in the owners cache and returns it.
func (f *FSM) cacheOwner(o string) string {
	if f.k.keepAliases {
		return o
	}
	if f.owners == nil {
		f.owners = new([ownerSlots]string)
	}
	f.owners[maphash.String(tableSeed, o)&(ownerSlots-1)] = o
	return o
}

// ownPair is own for two strings made at once (a new lock's name and its first holder's owner), in one
// allocation that both share.
func (f *FSM) ownPair(a, b string) (string, string) {
	if f.k.keepAliases || a == "" || b == "" {
		return f.own(a), f.own(b)
	}
	s := a + b
	return s[:len(a)], s[len(a):]
}
