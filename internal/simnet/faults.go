package simnet

import (
	"fmt"
	"time"
)

// Policy is how one link treats what crosses it. The zero Policy delivers
// everything at once, in order.
//
// Drop, Duplicate and Reorder are probabilities in [0, 1]. A raft message
// is lost with probability Drop (silently: a lossy link, not a broken
// stream), otherwise delivered twice with probability Duplicate; it waits
// for the messages sent before it on its link (FIFO) unless, with
// probability Reorder, it does not. A snapshot transfer is lost with
// probability Drop (its sender is told it failed) and a call fails with
// codes.Unavailable with probability Drop; they are never duplicated and
// never wait for each other. Every crossing takes a delay drawn uniformly
// from [MinDelay, MaxDelay]; a call's answer and a snapshot's outcome
// come back after a delay drawn from the return link's policy.
type Policy struct {
	Drop      float64
	Duplicate float64
	Reorder   float64
	MinDelay  time.Duration
	MaxDelay  time.Duration
}

func (p Policy) validate() error {
	for _, r := range []float64{p.Drop, p.Duplicate, p.Reorder} {
		if !(r >= 0 && r <= 1) {
			return fmt.Errorf("simnet: rate %v outside [0, 1]", r)
		}
	}
	if p.MinDelay < 0 || p.MaxDelay < p.MinDelay {
		return fmt.Errorf("simnet: delays [%v, %v] are not 0 <= MinDelay <= MaxDelay", p.MinDelay, p.MaxDelay)
	}
	return nil
}

func mustValid(p Policy) {
	if err := p.validate(); err != nil {
		panic(err)
	}
}

// delay maps a draw u in [0, 1) to a delay in [MinDelay, MaxDelay].
func (p Policy) delay(u float64) time.Duration {
	return p.MinDelay + time.Duration(u*float64(p.MaxDelay-p.MinDelay+1))
}

// faults is the network's fault state. Guarded by Network.mu.
type faults struct {
	policy   Policy
	links    map[[2]uint64]Policy // per-link policies (from, to)
	group    map[uint64]int       // partition group of each named id; unnamed ids are group 0
	isolated map[uint64]bool
	blocked  map[[2]uint64]bool // (from, to) cut one way
}

func (f *faults) init() {
	f.links = make(map[[2]uint64]Policy)
	f.group = make(map[uint64]int)
	f.isolated = make(map[uint64]bool)
	f.blocked = make(map[[2]uint64]bool)
}

func (f *faults) policyOf(from, to uint64) Policy {
	if p, ok := f.links[[2]uint64{from, to}]; ok {
		return p
	}
	return f.policy
}

// up reports whether from→to carries anything now.
func (f *faults) up(from, to uint64) bool {
	return f.group[from] == f.group[to] && !f.isolated[from] && !f.isolated[to] && !f.blocked[[2]uint64{from, to}]
}

// SetPolicy sets the policy of every link, replacing the policies of single
// links. It panics on a policy with a rate outside [0, 1] or delays out of
// order.
func (n *Network) SetPolicy(p Policy) {
	mustValid(p)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults.policy = p
	clear(n.faults.links)
}

// SetLinkPolicy sets the policy of the link from→to alone (one direction,
// every channel). It panics on an invalid policy, as SetPolicy.
func (n *Network) SetLinkPolicy(from, to uint64, p Policy) {
	mustValid(p)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults.links[[2]uint64{from, to}] = p
}

// Cuts (Partition, Isolate, Block, Heal) are judged when something
// arrives, so they take effect for everything on the way, deterministically
// even when made at the instant a message is sent. A policy is applied
// when something is sent: a policy change at the very instant a goroutine
// sends on the link races with the send.

// Partition cuts the links between groups, both ways, replacing the
// previous partition. Ids named in no group form one more group together.
// Partition() with no groups ends the partition (as Heal does, but leaving
// isolations and blocks).
func (n *Network) Partition(groups ...[]uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.faults.group)
	for i, g := range groups {
		for _, id := range g {
			n.faults.group[id] = i + 1
		}
	}
}

// Isolate cuts every link to and from id.
func (n *Network) Isolate(id uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults.isolated[id] = true
}

// Block cuts the link from→to, one way: from's messages and calls no longer
// reach to, and to's answers to calls from from are lost.
func (n *Network) Block(from, to uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults.blocked[[2]uint64{from, to}] = true
}

// Heal ends every partition, isolation and block. Policies stay.
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.faults.group)
	clear(n.faults.isolated)
	clear(n.faults.blocked)
}

// Pause holds everything that would run a Handler method of id's endpoint
// (raft messages, snapshots and calls arriving, answers and reports coming
// back) until Resume; it then runs in the order it would have. Pausing an id
// outlives its endpoint: a restarted endpoint of a paused id is paused too.
func (n *Network) Pause(id uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.paused[id] = true
}

// Resume ends a Pause of id; what was held is executed as soon as the
// network gets to it, before anything due later.
func (n *Network) Resume(id uint64) {
	n.mu.Lock()
	delete(n.paused, id)
	for _, ev := range n.held[id] {
		n.scheduleLocked(ev)
	}
	delete(n.held, id)
	n.mu.Unlock()
	n.poke()
}
