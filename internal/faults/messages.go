package faults

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// MessagePolicy drops, duplicates and delays single outgoing raft messages
// and keepalive and renewal calls, each decided independently from a seeded
// RNG. A delayed message is sent later from a timer, so it arrives out of
// order with the ones sent after it. The zero value injects nothing.
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
	f.msgs.set(m)
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

// callFault applies the message policy to one outgoing call: false means
// the call is dropped (the caller sees it fail). A delay sleeps (bounded by
// ctx); a duplicate runs dup once more in the background.
func (f *Faults) callFault(ctx context.Context, to uint64, dup func()) bool {
	m := f.msgs.get()
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

// filterOut drops messages to blocked peers and applies the message
// policy: it returns the messages to send now; delayed ones are handed to
// send later from a timer (copies, so they stay valid).
func (f *Faults) filterOut(msgs []*raftpb.Message, send func([]*raftpb.Message)) []*raftpb.Message {
	if len(msgs) == 0 {
		return msgs
	}
	pol := f.msgs.get()
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

// filterIn drops messages from blocked peers and passes the rest through
// the rewrite (RewriteIn).
func (f *Faults) filterIn(msgs []*raftpb.Message) []*raftpb.Message {
	if len(msgs) == 0 {
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
