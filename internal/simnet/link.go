package simnet

import (
	"math/rand/v2"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// Links and their randomness
//
// A link is one direction between two ids on one channel: raft messages,
// snapshot transfers and calls travel on channels of their own, as they do
// on separate gRPC streams. Each link has its own PCG stream, seeded from
// the network's seed and the link's (from, to, channel), and its own
// sequence numbers. A link's draws are made by the goroutine that sends on
// it, a fixed number per message whatever the policy, so what happens on
// one link never depends on how sends on other links interleave with it,
// nor on policy changes of other links. Who sends on one link, in which
// order, is the caller's business.

// channel separates the kinds of traffic of a pair of ids. Raft messages
// travel on two: the acknowledgements of durable writes (MsgAppResp and
// votes, which a node sends from the goroutine that writes its log) on
// chAck, everything else (sent from its raft loop) on chRaft, so that the
// order in which a node's two goroutines happen to send never changes what
// the network does with either. The last three only order reports and
// replies (they draw nothing).
type channel uint8

const (
	chRaft channel = iota
	chAck
	chSnap
	chCall
	chReply
	chSnapReport
	chUnreachable
)

type linkID struct {
	from, to uint64
	ch       channel
}

type link struct {
	rng  *rand.Rand
	seq  uint64
	last time.Time // the latest due time of a raft message kept in order (FIFO)
}

// linkLocked returns the link's state, made on first use. n.mu held.
func (n *Network) linkLocked(from, to uint64, ch channel) *link {
	id := linkID{from, to, ch}
	l := n.links[id]
	if l == nil {
		s := splitmix(n.seed)
		s2 := splitmix(splitmix(splitmix(s^from)^to) ^ uint64(ch))
		l = &link{rng: rand.New(rand.NewPCG(s, s2))}
		n.links[id] = l
	}
	return l
}

// next returns the link's next sequence number.
func (l *link) next() uint64 {
	l.seq++
	return l.seq
}

// splitmix is SplitMix64's finaliser: it spreads nearby inputs (ids 1, 2,
// 3) over the whole range.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// raftDraws are the draws of one raft message.
type raftDraws struct {
	drop, dup, reorder, delay, dupDelay float64
}

func (l *link) drawRaft() raftDraws {
	return raftDraws{l.rng.Float64(), l.rng.Float64(), l.rng.Float64(), l.rng.Float64(), l.rng.Float64()}
}

// rpcDraws are the draws of one snapshot transfer or call: whether it is
// lost, its delay there and (applied to the return link's policy when it
// returns) back.
type rpcDraws struct {
	drop, there, back float64
}

func (l *link) drawRPC() rpcDraws {
	return rpcDraws{l.rng.Float64(), l.rng.Float64(), l.rng.Float64()}
}

// rpcEventLocked decides the fate of one RPC (a call or a snapshot
// transfer) sent now on from→to over ch to addr and returns its event, for
// the caller to complete and schedule: lost to the policy's Drop or to an
// address with no endpoint, and with the draw for the return delay (back).
// n.mu held.
func (n *Network) rpcEventLocked(now time.Time, from, to uint64, ch channel, k kind, addr string) *event {
	l := n.linkLocked(from, to, ch)
	d := l.drawRPC()
	p := n.faults.policyOf(from, to)
	ev := &event{at: now.Add(p.delay(d.there)), from: from, to: to, ch: ch, seq: l.next(), kind: k, back: d.back}
	switch {
	case d.drop < p.Drop:
		ev.lost = lostPolicy
	case addr != Addr(to):
		ev.lost = lostAddress
	}
	return ev
}

// scheduleRaftLocked decides the fate of one raft message sent now on
// from→to and returns its events: one, or two with a duplicate; a lost one
// (dropped by the policy) is marked and still executed, for the trace. n.mu held.
func (n *Network) scheduleRaftLocked(now time.Time, from, to uint64, ch channel) []*event {
	l := n.linkLocked(from, to, ch)
	d := l.drawRaft()
	p := n.faults.policyOf(from, to)
	inOrder := d.reorder >= p.Reorder
	at := func(u float64) time.Time {
		t := now.Add(p.delay(u))
		if inOrder {
			if t.Before(l.last) {
				t = l.last
			}
			l.last = t
		}
		return t
	}
	ev := &event{at: at(d.delay), from: from, to: to, ch: ch, seq: l.next(), kind: evRaft}
	if d.drop < p.Drop {
		ev.lost = lostPolicy
		return []*event{ev}
	}
	if d.dup >= p.Duplicate {
		return []*event{ev}
	}
	dup := &event{at: at(d.dupDelay), from: from, to: to, ch: ch, seq: l.next(), kind: evRaft}
	return []*event{ev, dup}
}

// raftChannel is the channel a raft message travels on (see channel).
func raftChannel(t raftpb.MessageType) channel {
	switch t {
	case raftpb.MessageType_MsgAppResp, raftpb.MessageType_MsgVoteResp, raftpb.MessageType_MsgPreVoteResp:
		return chAck
	}
	return chRaft
}
