package lockfsm

// Status says what a command did.
type Status uint8

// Statuses. The numbers are stored in retained results: append only.
const (
	// StatusNone: the command failed (Result.Err says why) or was not applied.
	StatusNone Status = iota
	// Granted: the acquire holds the name now (new grant or reentrant increment; see HoldCount).
	Granted
	// Queued: the acquire waits in the name's FIFO queue at Result.Position.
	Queued
	// Released: a release dropped one hold level; HoldCount says how many remain (0 = the hold ended).
	Released
	// Cancelled: a cancel removed a waiter or undid the hold level its target acquire added; also the
	// status of a retained acquire result once that acquire was cancelled.
	Cancelled
	// NotFound: a cancel, lease expiry or lift-delay found nothing to act on (stale or already done).
	// Not an error, so retries are safe.
	NotFound
	// SessionOpened: Result.Session is the new session id.
	SessionOpened
	// SessionClosed: the session was closed or expired and everything it held or waited for is gone.
	SessionClosed
	// Noop: a KindNoop entry.
	Noop
	// Lifted: a lift-delay ended a name's lock-delay (and granted it to its next waiter, if any).
	Lifted
	// LeaseExpired: a lease expiry released the hold with Result.Token.
	LeaseExpired
	// Proclaimed: the election's leader announced its value (Result.Token is its term).
	Proclaimed
	statusEnd
)

var statusNames = [...]string{"None", "Granted", "Queued", "Released", "Cancelled", "NotFound",
	"SessionOpened", "SessionClosed", "Noop", "Lifted", "LeaseExpired", "Proclaimed"}

func (s Status) String() string { return enumName(s, statusNames[:], "Status") }

// Holder identifies who holds a lock: an owner string inside a session.
type Holder struct {
	Session uint64
	Owner   string
}

// Result is the outcome of one applied entry. Every replica computes the same Result for the same entry.
type Result struct {
	Err       error  // nil or one of the package's sentinels (compare with errors.Is)
	Status    Status // what happened
	Token     uint64 // Granted: the fencing token; Released/LeaseExpired: the token that was released
	HoldCount uint32 // the holder's hold count after this command
	Position  uint32 // Queued: 1 = next in line (a multi-name acquire: its place in Name's queue)
	// ErrLocked: the first hold in the way (zero while the name is in its lock-delay, when only waiters
	// are in the way, or when a semaphore lacks permits).
	Holder    Holder
	Session   uint64 // SessionOpened: the new session id
	Duplicate bool   // the (Session, Seq) was applied before: this is its stored result, nothing changed
}

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds.
const (
	// EventGranted: a new hold (immediate or from the queue; not reentrant increments). Name, Session,
	// Owner, Seq (of the acquire that asked), Token, LeaseMillis, FromQueue, Mode, Permits; a multi-name
	// hold is one event with ExtraNames. Several may share a Token (readers or permits granted in one entry).
	EventGranted EventKind = iota + 1
	// EventReleased: a hold ended. Name, Session, Owner, Token, Mode, Permits, Reason, ExtraNames.
	EventReleased
	// EventWaitEnded: a waiter left the queue without a grant. Name, Session, Owner, Seq, Reason,
	// ExtraNames (one event for a multi-name waiter).
	EventWaitEnded
	// EventSessionOpened: Session, Node, TTLMillis.
	EventSessionOpened
	// EventSessionEnded: Session, Reason (ReasonSessionClosed or ReasonSessionExpired).
	EventSessionEnded
	// EventDelayed: Name, Token (the index that started the delay), DelayMillis. The leader arms a timer and
	// then proposes KindLiftDelay.
	EventDelayed
	// EventLeader: an election's leader or its value changed. Name, Session, Owner, Token (its term), Value;
	// Session 0 and Token 0: nobody leads now. Exactly one per election name per entry that changed it,
	// after that entry's Granted and Released events, so the node can push every change in log order.
	EventLeader
	// EventSessionEnding: Session, Reason. The session ends over several entries (ending.go): its commands
	// are refused from now on; EventSessionEnded follows with its last run.
	EventSessionEnding
)

var eventNames = [...]string{"", "Granted", "Released", "WaitEnded", "SessionOpened", "SessionEnded", "Delayed",
	"Leader", "SessionEnding"}

func (k EventKind) String() string { return enumName(k, eventNames[:], "EventKind") }

// Reason says why a hold or wait or session ended.
type Reason uint8

// Reasons.
const (
	ReasonNone Reason = iota
	ReasonUnlock
	ReasonCancel
	ReasonLeaseExpired
	ReasonSessionClosed
	ReasonSessionExpired
)

var reasonNames = [...]string{"None", "Unlock", "Cancel", "LeaseExpired", "SessionClosed", "SessionExpired"}

func (r Reason) String() string { return enumName(r, reasonNames[:], "Reason") }

// Event is one state change a node may have to react to (wake a waiter, arm a timer). Events are emitted in
// apply order, only for new changes (never for duplicates). Strings in events are owned by the FSM's
// state and are never modified, so callers may keep them.
type Event struct {
	Kind                                                           EventKind
	Name, Owner                                                    string
	Session, Seq, Token, LeaseMillis, TTLMillis, DelayMillis, Node uint64
	Reason                                                         Reason
	FromQueue                                                      bool
	Mode                                                           Mode
	Permits                                                        uint32
	Value                                                          string
	ExtraNames                                                     []string
}
