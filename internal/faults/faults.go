// Package faults injects network and disk faults into one lockraft node, for
// the module's tests and its fault checker. It plugs into the node's seams
// (internal/knobs): a wrapper around its network (transport.Network, gRPC or
// in-memory) and the Handler beneath it, a wrapper around its raft log
// (raftlog.Log), and the knob hooks for what no seam reaches (a paused
// process, lock-table commits and snapshot writes). Nothing here is in the
// node's production path: a node without knobs runs none of it.
//
// A Faults decides, per peer, whether the node's outgoing raft messages and
// calls and its incoming raft messages and calls get through, and may drop,
// duplicate or delay single outgoing messages and keepalive calls
// (SetMessagePolicy). A partition blocks both directions on both sides;
// blocking one direction gives a one-way partition. The zero value lets
// everything through. Safe for concurrent use.
package faults

import (
	"sync"

	"github.com/lockraft/lockraft/internal/knobs"
	"github.com/lockraft/lockraft/transport"
)

// Faults is one node's fault state.
type Faults struct {
	mu     sync.RWMutex    // guards out, in, paused and loop
	out    map[uint64]bool // blocked destinations
	in     map[uint64]bool // blocked sources
	paused chan struct{}   // non-nil while paused; closed by Resume
	loop   chan struct{}   // non-nil while only the loop is paused (PauseLoop); closed by Resume
	store  storeFaults     // snapshot stalls, conf-state write failures, inbound rewrites

	disk   setting[error]      // non-nil: every raft log write fails with it
	commit setting[error]      // non-nil: every lock-table commit fails with it
	msgs   setting[*msgFaults] // nil: no per-message faults
	deaf   setting[bool]       // DropPushes
}

// A setting is one fault that a test sets and the node's seams read, with
// a lock of its own; its zero value lets everything through.
type setting[T any] struct {
	mu sync.RWMutex
	v  T
}

func (s *setting[T]) set(v T) {
	s.mu.Lock()
	s.v = v
	s.mu.Unlock()
}

func (s *setting[T]) get() T {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.v
}

// Knobs plants f in k (a new Knobs if k is nil) and returns it: f wraps the
// network k would start (gRPC if none), the node's raft log, and the
// pause, commit and snapshot hooks.
func (f *Faults) Knobs(k *knobs.Node) *knobs.Node {
	if k == nil {
		k = &knobs.Node{}
	}
	inner := k.Network
	if inner == nil {
		inner = transport.Start
	}
	k.Network = f.wrapNetwork(inner)
	k.WrapLog = f.wrapLog
	k.Paused = f.waitIfPaused
	k.LoopPaused = f.waitLoop
	k.FSMCommitError = f.commit.get
	k.SnapshotStall = f.snapshotStall
	k.DropPushes = f.deaf.get
	return k
}

// Pause freezes the node's loop, raft log writes and keepalive sender, as
// SIGSTOP or a long GC pause would: no ticks, no applies, no keepalives,
// until Resume. Incoming messages queue up and are dropped once the queue
// is full.
func (f *Faults) Pause() {
	f.mu.Lock()
	if f.paused == nil {
		f.paused = make(chan struct{})
	}
	f.mu.Unlock()
}

// PauseLoop freezes only the node's loop goroutine: no ticks, applies or
// proposals, as a long synchronous disk write inside the loop would. The
// keepalive sender, the transport and the holder-side timers go on. Resume
// ends it.
func (f *Faults) PauseLoop() {
	f.mu.Lock()
	if f.loop == nil {
		f.loop = make(chan struct{})
	}
	f.mu.Unlock()
}

// Resume ends a Pause or a PauseLoop.
func (f *Faults) Resume() {
	f.mu.Lock()
	if f.paused != nil {
		close(f.paused)
		f.paused = nil
	}
	if f.loop != nil {
		close(f.loop)
		f.loop = nil
	}
	f.mu.Unlock()
}

// waitLoop waits out a PauseLoop (the node's loop turn).
func (f *Faults) waitLoop(stop <-chan struct{}) {
	f.mu.RLock()
	p := f.loop
	f.mu.RUnlock()
	awaitGate(p, stop)
}

// waitIfPaused blocks while the node is paused (or until stop closes).
func (f *Faults) waitIfPaused(stop <-chan struct{}) {
	f.mu.RLock()
	p := f.paused
	f.mu.RUnlock()
	awaitGate(p, stop)
}

// awaitGate blocks until gate or stop is closed; a nil gate is open.
func awaitGate(gate, stop <-chan struct{}) {
	if gate == nil {
		return
	}
	select {
	case <-gate:
	case <-stop:
	}
}

// BlockOut stops raft messages and calls from this node to ids.
func (f *Faults) BlockOut(ids ...uint64) { f.set(&f.out, ids, true) }

// BlockIn stops raft messages and calls from ids to this node.
func (f *Faults) BlockIn(ids ...uint64) { f.set(&f.in, ids, true) }

// Heal lets everything through again.
func (f *Faults) Heal() {
	f.mu.Lock()
	f.out, f.in = nil, nil
	f.mu.Unlock()
}

func (f *Faults) set(m *map[uint64]bool, ids []uint64, v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *m == nil {
		*m = map[uint64]bool{}
	}
	for _, id := range ids {
		(*m)[id] = v
	}
}

func (f *Faults) allowsOut(to uint64) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return !f.out[to]
}

func (f *Faults) allowsIn(from uint64) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return !f.in[from]
}

// DropPushes makes a light member refuse every push and ignore the results
// in its forwarded proposals' answers (on), so that only its status calls
// inform it, or ends that (off).
func (f *Faults) DropPushes(on bool) { f.deaf.set(on) }

// UnblockOut lets messages and calls from this node to ids through again.
func (f *Faults) UnblockOut(ids ...uint64) { f.set(&f.out, ids, false) }

// UnblockIn lets messages and calls from ids to this node through again.
func (f *Faults) UnblockIn(ids ...uint64) { f.set(&f.in, ids, false) }
