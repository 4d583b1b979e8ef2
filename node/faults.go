package node

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Faults injects network and disk faults around the real transport and
// storage, for tests and the fault checker: it decides, per peer, whether
// this node's outgoing raft messages and calls (keepalives, renewals) and
// its incoming raft messages get through, and may drop, duplicate or delay
// single outgoing messages (SetMessagePolicy). A partition is made by blocking both directions on both
// sides; blocking only one direction gives a one-way partition. The zero
// value lets everything through. Safe for concurrent use.
type Faults struct {
	mu     sync.RWMutex
	out    map[uint64]bool // blocked destinations
	in     map[uint64]bool // blocked sources
	paused chan struct{}   // non-nil while paused; closed by Resume
	loop   chan struct{}   // non-nil while only the loop is paused (PauseLoop); closed by Resume
	disk   error           // non-nil: every raft log write fails with it
	commit error           // non-nil: every lock-table commit fails with it
	msgs   *msgFaults      // nil: no per-message faults
	store  storeFaults     // snapshot stalls, conf-state write failures, inbound rewrites (storefaults.go)
}

// MessagePolicy drops, duplicates and delays single outgoing raft messages
// and calls (keepalives, renewals), each decided independently from a
// seeded RNG. A delayed message is sent later from a timer, so it arrives
// out of order with the ones sent after it. The zero value injects nothing.
type MessagePolicy struct {
	Seed      uint64        // RNG seed (the decisions also depend on timing)
	Peers     []uint64      // destinations affected; empty: all
	DropRate  float64       // share of messages/calls dropped
	DupRate   float64       // share of messages/calls sent twice
	DelayRate float64       // share of messages/calls delayed
	DelayMin  time.Duration // delays are uniform in (DelayMin, DelayMax]
	DelayMax  time.Duration
}

type msgFaults struct {
	p     MessagePolicy
	peers map[uint64]bool
	mu    sync.Mutex
	rng   *rand.Rand
}

// SetMessagePolicy replaces the per-message fault policy; the zero
// MessagePolicy turns per-message faults off.
func (f *Faults) SetMessagePolicy(p MessagePolicy) {
	var m *msgFaults
	if p.DropRate > 0 || p.DupRate > 0 || (p.DelayRate > 0 && p.DelayMax > 0) {
		m = &msgFaults{p: p, rng: rand.New(rand.NewPCG(p.Seed, 0x6d736773))}
		if len(p.Peers) > 0 {
			m.peers = map[uint64]bool{}
			for _, id := range p.Peers {
				m.peers[id] = true
			}
		}
	}
	f.mu.Lock()
	f.msgs = m
	f.mu.Unlock()
}

// decide returns what happens to one message or call to peer to.
func (m *msgFaults) decide(to uint64) (drop, dup bool, delay time.Duration) {
	if m.peers != nil && !m.peers[to] {
		return false, false, 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rng.Float64() < m.p.DropRate {
		return true, false, 0
	}
	dup = m.rng.Float64() < m.p.DupRate
	if m.p.DelayMax > 0 && m.rng.Float64() < m.p.DelayRate {
		lo := min(max(m.p.DelayMin, 0), m.p.DelayMax-1)
		delay = lo + 1 + time.Duration(m.rng.Int64N(int64(m.p.DelayMax-lo)))
	}
	return false, dup, delay
}

func (f *Faults) msgPolicy() *msgFaults {
	if f == nil {
		return nil
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.msgs
}

// callFault applies the message policy to one outgoing call: false means
// the call is dropped (the caller treats it as failed). A delay sleeps
// (bounded by ctx); a duplicate runs dup once more in the background.
func (f *Faults) callFault(ctx context.Context, to uint64, dup func()) bool {
	m := f.msgPolicy()
	if m == nil {
		return true
	}
	drop, twice, delay := m.decide(to)
	if drop {
		return false
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
	}
	if twice {
		go dup()
	}
	return true
}

// FailCommits makes every following lock-table commit (the periodic write
// of lockfsm's dirty records to locks.db) fail with err (nil heals).
func (f *Faults) FailCommits(err error) {
	f.mu.Lock()
	f.commit = err
	f.mu.Unlock()
}

func (f *Faults) commitError() error {
	if f == nil {
		return nil
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.commit
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

// waitLoop is waitIfPaused for the loop goroutine: it also waits out a
// PauseLoop.
func (f *Faults) waitLoop(stop <-chan struct{}) {
	if f == nil {
		return
	}
	f.mu.RLock()
	p := f.loop
	f.mu.RUnlock()
	if p != nil {
		select {
		case <-p:
		case <-stop:
		}
	}
	f.waitIfPaused(stop)
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

// filterOut drops messages to blocked peers and applies the message
// policy: it returns the messages to send now; delayed ones are handed to
// send later from a timer (copies, so they stay valid).
func (f *Faults) filterOut(msgs []*raftpb.Message, send func([]*raftpb.Message)) []*raftpb.Message {
	if f == nil || len(msgs) == 0 {
		return msgs
	}
	pol := f.msgPolicy()
	kept := msgs[:0:0]
	for _, m := range msgs {
		if !f.allowsOut(m.GetTo()) {
			continue
		}
		if pol == nil || m.GetType() == raftpb.MessageType_MsgSnap {
			kept = append(kept, m)
			continue
		}
		drop, dup, delay := pol.decide(m.GetTo())
		if drop {
			continue
		}
		if delay > 0 {
			c := proto.Clone(m).(*raftpb.Message)
			time.AfterFunc(delay, func() {
				if f.allowsOut(c.GetTo()) {
					send([]*raftpb.Message{c})
				}
			})
		} else {
			kept = append(kept, m)
		}
		if dup {
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
	return f.store.rewriteIn(kept)
}
