package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/node"
)

var sprintf = fmt.Sprintf

// NodeSet is what clients and end checks need of a cluster: slots by id,
// the running node in a slot (nil while down) and its pause gate.
type NodeSet interface {
	IDs() []uint64
	Node(id uint64) *node.Node
	PauseGate(id uint64) <-chan struct{}
}

// WorkloadOptions shapes the clients.
type WorkloadOptions struct {
	ClientsPerNode int
	Names          []string
	TryLockShare   float64       // share of acquires that are TryLock
	MaxWait        time.Duration // Lock timeouts are uniform in [MaxWait/20, MaxWait]
	MaxHold        time.Duration // hold times uniform in [0, MaxHold]
	// LongHoldShare of the critical sections hold for up to LongHold
	// instead (default 0: none). A holder that learns of its loss late is
	// visible as a live overlap only while its section lasts: sections
	// longer than the session TTL make S5 lateness under partitions and
	// clock faults visible.
	LongHoldShare float64
	LongHold      time.Duration
	// BugIgnoreFailedLock is a planted client bug: after a failed Lock the
	// client enters the critical section anyway, with the token of its last
	// grant.
	BugIgnoreFailedLock bool
	// Primitives the clients drive, each operation picking one at random
	// (default: the mutex alone, on Names). The catalogue's use names of
	// their own (catworkload.go).
	Primitives []string
	// Jitter makes each client wait a seeded 1–997 µs before each
	// operation, so that no two clients call at the same instant: in the
	// simulation the order in which goroutines woken together run is the
	// one thing the seed does not decide (sim.go).
	Jitter bool
}

// DefaultWorkload: 3 clients per node on 3 names.
func DefaultWorkload() WorkloadOptions {
	return WorkloadOptions{ClientsPerNode: 3, Names: []string{"a", "b", "c"}, TryLockShare: 0.3,
		MaxWait: time.Second, MaxHold: 20 * time.Millisecond}
}

// Workload runs clients against a cluster, recording a history and writing
// to a fenced store inside every critical section.
type Workload struct {
	c     NodeSet
	opts  WorkloadOptions
	H     *History
	Store *FencedStore
	seed  uint64
	// Observations of the elections (PrimElection), one per observer
	// started on a node (catworkload.go).
	obsMu        sync.Mutex
	Observations []*Observation
}

// NewWorkload prepares clients.
func NewWorkload(c NodeSet, seed uint64, opts WorkloadOptions) *Workload {
	return &Workload{c: c, opts: opts, H: NewHistory(), Store: NewFencedStore(), seed: seed}
}

// Run runs every client until ctx is done, then waits for them.
func (w *Workload) Run(ctx context.Context) {
	var wg sync.WaitGroup
	if slices.Contains(w.opts.Primitives, PrimElection) {
		for _, id := range w.c.IDs() {
			for _, name := range electionNames {
				wg.Add(1)
				go func() {
					defer wg.Done()
					w.observeLoop(ctx, id, name)
				}()
			}
		}
	}
	client := 0
	for _, id := range w.c.IDs() {
		for k := 0; k < w.opts.ClientsPerNode; k++ {
			wg.Add(1)
			go func(client int, id uint64) {
				defer wg.Done()
				w.client(ctx, client, id)
			}(client, id)
			client++
		}
	}
	wg.Wait()
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// jitter waits a seeded moment (WorkloadOptions.Jitter).
func (w *Workload) jitter(ctx context.Context, rng *rand.Rand) {
	if w.opts.Jitter {
		sleepCtx(ctx, time.Duration(1+rng.IntN(997))*time.Microsecond)
	}
}

func (w *Workload) waitUnpaused(ctx context.Context, id uint64) {
	if g := w.c.PauseGate(id); g != nil {
		select {
		case <-g:
		case <-ctx.Done():
		}
	}
}

func (w *Workload) client(ctx context.Context, client int, id uint64) {
	rng := rand.New(rand.NewPCG(w.seed, uint64(client)+1))
	var lastToken uint64
	for seq := 0; ctx.Err() == nil; seq++ {
		w.jitter(ctx, rng)
		w.waitUnpaused(ctx, id)
		n := w.c.Node(id)
		if n == nil {
			sleepCtx(ctx, 20*time.Millisecond)
			continue
		}
		if p := w.opts.Primitives; len(p) > 0 {
			if prim := p[rng.IntN(len(p))]; prim != PrimMutex {
				w.catalogueOp(ctx, rng, client, id, n, fmt.Sprintf("c%d-%d", client, seq), prim)
				continue
			}
		}
		name := w.opts.Names[rng.IntN(len(w.opts.Names))]
		owner := fmt.Sprintf("c%d-%d", client, seq)
		wait := rng.Float64() >= w.opts.TryLockShare
		timeout := time.Duration(float64(w.opts.MaxWait) * (0.05 + 0.95*rng.Float64()))
		hold := time.Duration(float64(w.opts.MaxHold) * rng.Float64())
		if w.opts.LongHoldShare > 0 && rng.Float64() < w.opts.LongHoldShare {
			hold = time.Duration(float64(w.opts.LongHold) * rng.Float64())
		}
		op := w.H.Begin(client, id, acquireKind(wait), name, owner)
		actx, cancel := context.WithTimeout(context.Background(), timeout)
		h, err := n.Acquire(actx, name, owner, wait, 0)
		cancel()
		w.endAcquire(op, h, err, wait)
		if err != nil {
			if w.opts.BugIgnoreFailedLock && lastToken != 0 {
				sec := w.Store.Enter(name, owner, lastToken, nil)
				w.Store.Write(sec)
				sleepCtx(ctx, hold)
				w.Store.Write(sec)
				w.Store.Exit(sec)
			}
			if !errors.Is(err, lockerr.ErrLocked) {
				sleepCtx(ctx, time.Duration(rng.IntN(20))*time.Millisecond)
			}
			continue
		}
		lastToken = h.Token()
		w.critical(ctx, id, n, h, hold)
		// Release: a fresh op whose hold may already be lost.
		uop := w.H.Begin(client, id, OpUnlock, name, owner)
		w.H.SetHeldFrom(uop, op.End)
		w.release(uop, h)
	}
}

// critical writes to the store with the hold's token: at entry, a few times
// in between and at exit, stopping as soon as the hold is lost.
func (w *Workload) critical(ctx context.Context, id uint64, n *node.Node, h *node.Hold, hold time.Duration) {
	live := func() bool {
		return h.Context().Err() == nil && w.c.PauseGate(id) == nil
	}
	sec := w.Store.EnterSection(&Section{Name: h.Name(), Owner: h.Owner(), Token: h.Token(), Live: live,
		Node: n.ID(), Ctx: h.Context()})
	defer w.Store.Exit(sec)
	steps := 3
	for i := 0; i < steps; i++ {
		w.waitUnpaused(ctx, id)
		if h.Context().Err() != nil {
			return
		}
		w.Store.Write(sec)
		if i < steps-1 {
			sleepCtx(h.Context(), hold/time.Duration(steps-1))
		}
	}
}

// acquireKind is the kind of an acquire that waits, or does not.
func acquireKind(wait bool) OpKind {
	if wait {
		return OpLock
	}
	return OpTryLock
}

// endAcquire records the answer to the acquire op: ok with the hold's token,
// a try's refusal, or an unknown outcome (any other error).
func (w *Workload) endAcquire(op *Op, h *node.Hold, err error, wait bool) {
	switch {
	case err == nil:
		w.H.End(op, OK, h.Token(), nil)
	case !wait && errors.Is(err, lockerr.ErrLocked):
		w.H.End(op, Locked, 0, err)
	default:
		w.H.End(op, Unknown, 0, err)
	}
}

// release releases h (within 2 s) and records the answer in the unlock op
// uop: ok, or an unknown outcome (the hold may already have been lost).
func (w *Workload) release(uop *Op, h *node.Hold) {
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := h.Release(rctx)
	rcancel()
	if err == nil {
		w.H.End(uop, OK, h.Token(), nil)
	} else {
		w.H.End(uop, Unknown, h.Token(), err)
	}
}
