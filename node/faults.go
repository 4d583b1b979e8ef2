package node

import (
	"sync"

	"go.etcd.io/raft/v3/raftpb"
)

// Faults injects network faults around the real transport, for tests and
// the fault checker: it decides, per peer, whether this node's outgoing raft
// messages and calls (keepalives, renewals) and its incoming raft messages
// get through. A partition is made by blocking both directions on both
// sides; blocking only one direction gives a one-way partition. The zero
// value lets everything through. Safe for concurrent use.
type Faults struct {
	mu     sync.RWMutex
	out    map[uint64]bool // blocked destinations
	in     map[uint64]bool // blocked sources
	paused chan struct{}   // non-nil while paused; closed by Resume
	disk   error           // non-nil: every raft log write fails with it
}

// FailWrites makes every following raft log write fail with err (nil heals),
// as a full or failing disk would. The node must stop serving rather than
// acknowledge anything it could not make durable.
func (f *Faults) FailWrites(err error) {
	f.mu.Lock()
	f.disk = err
	f.mu.Unlock()
}

func (f *Faults) writeError() error {
	if f == nil {
		return nil
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.disk
}

// Pause freezes the node's loop and keepalive sender, as SIGSTOP or a long
// GC pause would: no ticks, no applies, no keepalives, until Resume.
// Incoming messages queue up and are dropped once the queue is full.
func (f *Faults) Pause() {
	f.mu.Lock()
	if f.paused == nil {
		f.paused = make(chan struct{})
	}
	f.mu.Unlock()
}

// Resume ends a Pause.
func (f *Faults) Resume() {
	f.mu.Lock()
	if f.paused != nil {
		close(f.paused)
		f.paused = nil
	}
	f.mu.Unlock()
}

// waitIfPaused blocks while the node is paused (or until stop closes).
func (f *Faults) waitIfPaused(stop <-chan struct{}) {
	if f == nil {
		return
	}
	f.mu.RLock()
	p := f.paused
	f.mu.RUnlock()
	if p == nil {
		return
	}
	select {
	case <-p:
	case <-stop:
	}
}

// BlockOut stops messages and calls from this node to ids.
func (f *Faults) BlockOut(ids ...uint64) { f.set(&f.out, ids, true) }

// BlockIn stops raft messages from ids to this node.
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
	if f == nil {
		return true
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return !f.out[to]
}

func (f *Faults) allowsIn(from uint64) bool {
	if f == nil {
		return true
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return !f.in[from]
}

// filterOut drops messages to blocked peers (in place).
func (f *Faults) filterOut(msgs []*raftpb.Message) []*raftpb.Message {
	if f == nil || len(msgs) == 0 {
		return msgs
	}
	kept := msgs[:0:0]
	for _, m := range msgs {
		if f.allowsOut(m.GetTo()) {
			kept = append(kept, m)
		}
	}
	return kept
}

func (f *Faults) filterIn(msgs []*raftpb.Message) []*raftpb.Message {
	if f == nil || len(msgs) == 0 {
		return msgs
	}
	kept := msgs[:0:0]
	for _, m := range msgs {
		if f.allowsIn(m.GetFrom()) {
			kept = append(kept, m)
		}
	}
	return kept
}
