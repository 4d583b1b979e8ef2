package chaos

import (
	"slices"
	"sync"
	"time"
)

// OpKind is a client operation.
type OpKind uint8

const (
	OpLock     OpKind = iota + 1 // Acquire with wait
	OpTryLock                    // Acquire without wait
	OpUnlock                     // Hold.Release
	OpProclaim                   // an election leader's Proclaim
)

func (k OpKind) String() string {
	return [...]string{"?", "Lock", "TryLock", "Unlock", "Proclaim"}[k]
}

// Primitives a workload can drive (WorkloadOptions.Primitives).
const (
	PrimMutex     = "mutex"
	PrimRW        = "rw"
	PrimSemaphore = "semaphore"
	PrimElection  = "election"
	PrimMulti     = "multi"
)

// AllPrimitives is every primitive of the catalogue.
var AllPrimitives = []string{PrimMutex, PrimRW, PrimSemaphore, PrimElection, PrimMulti}

// Outcome is what the client saw.
type Outcome uint8

const (
	Pending Outcome = iota // never completed (the run ended first)
	OK                     // granted (token) or released
	Locked                 // TryLock: ErrLocked
	Unknown                // timeout, node closed, lost hold, any other error: effect unknown
)

func (o Outcome) String() string { return [...]string{"pending", "ok", "locked", "unknown"}[o] }

// Op is one invocation and its completion. Times are nanoseconds since the
// history began, on the test process's monotonic clock (not a node clock).
type Op struct {
	ID      int
	Client  int
	Node    uint64
	Kind    OpKind
	Name    string
	Owner   string // unique per Acquire; the Unlock carries its Acquire's owner
	Start   int64
	End     int64
	Outcome Outcome
	Token   uint64
	Err     string
	// HeldFrom (Unlock only): when the Acquire it releases returned. A hold
	// can be lost (session expiry) any time after that.
	HeldFrom int64
	// The catalogue (empty Prim: the mutex). Shared: a read-write lock's
	// read side; Permits of Limit: a semaphore acquisition; Names: every
	// name of a multi-name lock (a single-name op on a name of a multi-name
	// group has one); Group: the multi-name group its names belong to.
	Prim    string
	Shared  bool
	Permits int
	Limit   int
	Names   []string
	Group   string
}

// History is a concurrent-safe record of operations.
type History struct {
	mu    sync.Mutex
	start time.Time
	ops   []*Op
}

// NewHistory starts a history now.
func NewHistory() *History { return &History{start: time.Now()} }

// Now is the history's clock.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// At is t on the history's clock.
func (h *History) At(t time.Time) int64 { return int64(t.Sub(h.start)) }

// Begin records an invocation.
func (h *History) Begin(client int, nodeID uint64, kind OpKind, name, owner string) *Op {
	return h.BeginOp(Op{Client: client, Node: nodeID, Kind: kind, Name: name, Owner: owner})
}

// BeginOp records the invocation of op (Client, Node, Kind, Name, Owner and
// the catalogue fields set by the caller).
func (h *History) BeginOp(op Op) *Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	op.ID, op.Start = len(h.ops), h.Now()
	p := &op
	h.ops = append(h.ops, p)
	return p
}

// End records a completion.
func (h *History) End(op *Op, out Outcome, token uint64, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	op.End = h.Now()
	op.Outcome = out
	op.Token = token
	if err != nil {
		op.Err = err.Error()
	}
}

// SetHeldFrom records when the hold an Unlock releases was granted.
func (h *History) SetHeldFrom(op *Op, t int64) {
	h.mu.Lock()
	op.HeldFrom = t
	h.mu.Unlock()
}

// Add appends a finished operation (used by tests that forge histories).
func (h *History) Add(op Op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	op.ID = len(h.ops)
	h.ops = append(h.ops, &op)
}

// Ops returns a copy of the operations.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Op, len(h.ops))
	for i, op := range h.ops {
		out[i] = *op
	}
	return out
}

// LongestGap is the longest interval with no operation completing with a
// determinate outcome (ok or locked): the longest unavailability seen by
// clients.
func LongestGap(ops []Op, end int64) time.Duration {
	var ends []int64
	for _, op := range ops {
		if op.Outcome == OK || op.Outcome == Locked {
			ends = append(ends, op.End)
		}
	}
	slices.Sort(ends)
	var gap, prev int64
	for _, e := range ends {
		gap = max(gap, e-prev)
		prev = e
	}
	gap = max(gap, end-prev)
	return time.Duration(gap)
}
