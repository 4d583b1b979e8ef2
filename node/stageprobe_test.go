package node

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/internal/knobs"
)

// StageProbe records when each raft entry passed each stage of its way
// through a cluster, on every node, so that a benchmark can say where an
// operation's time goes (BenchmarkStages): forwarding, the leader's and a
// follower's fsync, each network hop, the commit notice, the caller's
// wake-up. Give every node of one cluster the same probe
// (knobs.Node.Stages). It records indexes below its capacity and nodes
// with ids 1..maxStageNodes; stamps are lock-free atomics. With no probe set
// each stage costs a nil check.
type StageProbe struct {
	base  time.Time
	cap   uint64
	at    []atomic.Int64  // [(index*maxStageNodes + node-1)*numStages + stage]: ns since base
	owner []atomic.Uint64 // index → the node whose caller's command it carries
	acked [maxStageNodes + 1]uint64
}

const maxStageNodes = 4

// The stages an entry passes. Called, proposed and returned are stamped on
// the node whose caller made the command; acked is stamped by the leader at
// the follower's slot when that follower's acknowledgement arrives.
const (
	stageCalled   = knobs.StageCalled
	stageProposed = knobs.StageProposed
	stageAppended = knobs.StageAppended
	stageSent     = knobs.StageSent
	stageReceived = knobs.StageReceived
	stageDurable  = knobs.StageDurable
	stageAcked    = knobs.StageAcked
	stageApplied  = knobs.StageApplied
	stageReturned = knobs.StageReturned
	numStages     = knobs.NumStages
)

var _ knobs.Stages = (*StageProbe)(nil)

// NewStageProbe returns a probe for raft indexes below capacity.
func NewStageProbe(capacity int) *StageProbe {
	return &StageProbe{
		base:  time.Now(),
		cap:   uint64(capacity),
		at:    make([]atomic.Int64, capacity*maxStageNodes*int(numStages)),
		owner: make([]atomic.Uint64, capacity),
	}
}

// Stamp records that entry index passed stage on node at t.
func (p *StageProbe) Stamp(node, index uint64, stage knobs.Stage, t time.Time) {
	if p == nil || index >= p.cap || node == 0 || node > maxStageNodes {
		return
	}
	v := max(int64(t.Sub(p.base)), 1)
	p.at[(index*maxStageNodes+node-1)*uint64(numStages)+uint64(stage)].CompareAndSwap(0, v)
}

func (p *StageProbe) get(node, index uint64, stage knobs.Stage) time.Duration {
	return time.Duration(p.at[(index*maxStageNodes+node-1)*uint64(numStages)+uint64(stage)].Load())
}

// Ack stamps the entries a follower's acknowledgement covers (leader's loop
// only).
func (p *StageProbe) Ack(m *raftpb.Message) {
	if p == nil || m.GetType() != raftpb.MessageType_MsgAppResp || m.GetReject() {
		return
	}
	f := m.GetFrom()
	if f == 0 || f > maxStageNodes {
		return
	}
	now := time.Now()
	for i := p.acked[f] + 1; i <= m.GetIndex() && i < p.cap; i++ {
		p.Stamp(f, i, stageAcked, now)
	}
	p.acked[f] = max(p.acked[f], m.GetIndex())
}

// Returned stamps a caller's command once its result is back (caller's
// goroutine; o's fields were set by the loop before it sent the result).
func (p *StageProbe) Returned(node, index uint64, called, proposed time.Time) {
	if p == nil || index == 0 || index >= p.cap {
		return
	}
	p.owner[index].Store(node)
	p.Stamp(node, index, stageCalled, called)
	p.Stamp(node, index, stageProposed, proposed)
	p.Stamp(node, index, stageReturned, time.Now())
}

// Report writes, for the commands of callers on the leader and on followers
// separately, the p50 and p90 of each step of an entry's way, in
// microseconds. The follower used for the replication steps is the first to
// acknowledge.
func (p *StageProbe) Report(w io.Writer, leader uint64) {
	type key struct {
		role string
		step int
	}
	steps := []string{
		"call → proposed (caller → loop)",
		"proposed → leader appended (forwarding)",
		"leader appended → durable (leader fsync)",
		"leader appended → follower received",
		"leader appended → sent",
		"sent → follower received",
		"follower received → appended",
		"follower appended → durable (fsync)",
		"follower durable → leader has ack",
		"max(ack, leader durable) → leader applied",
		"leader applied → caller's node applied",
		"caller's node applied → caller returned",
		"total: call → returned",
	}
	vals := map[key][]float64{}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	for i := uint64(1); i < p.cap; i++ {
		o := p.owner[i].Load()
		if o == 0 {
			continue
		}
		role := "follower's caller"
		if o == leader {
			role = "leader's caller"
		}
		la, ld, lap := p.get(leader, i, stageAppended), p.get(leader, i, stageDurable), p.get(leader, i, stageApplied)
		var f uint64
		var ack time.Duration
		for id := uint64(1); id <= maxStageNodes; id++ {
			if a := p.get(id, i, stageAcked); id != leader && a > 0 && (f == 0 || a < ack) {
				f, ack = id, a
			}
		}
		if la == 0 || ld == 0 || lap == 0 || f == 0 {
			continue
		}
		d := []time.Duration{
			p.get(o, i, stageProposed) - p.get(o, i, stageCalled),
			la - p.get(o, i, stageProposed),
			ld - la,
			p.get(f, i, stageReceived) - la,
			p.get(leader, i, stageSent) - la,
			p.get(f, i, stageReceived) - p.get(leader, i, stageSent),
			p.get(f, i, stageAppended) - p.get(f, i, stageReceived),
			p.get(f, i, stageDurable) - p.get(f, i, stageAppended),
			ack - p.get(f, i, stageDurable),
			lap - max(ack, ld),
			p.get(o, i, stageApplied) - lap,
			p.get(o, i, stageReturned) - p.get(o, i, stageApplied),
			p.get(o, i, stageReturned) - p.get(o, i, stageCalled),
		}
		for s, v := range d {
			if s == 10 && o == leader {
				continue
			}
			vals[key{role, s}] = append(vals[key{role, s}], us(v))
		}
	}
	for _, role := range []string{"leader's caller", "follower's caller"} {
		if len(vals[key{role, len(steps) - 1}]) == 0 {
			continue
		}
		fmt.Fprintf(w, "%s (µs)%*s %8s %8s\n", role, 44-len(role), "", "p50", "p90")
		for s, name := range steps {
			v := vals[key{role, s}]
			if len(v) == 0 {
				continue
			}
			slices.Sort(v)
			fmt.Fprintf(w, "  %-46s %8.0f %8.0f\n", name, v[len(v)/2], v[len(v)*9/10])
		}
		fmt.Fprintf(w, "  (%d commands)\n", len(vals[key{role, len(steps) - 1}]))
	}
}

// OrderReport writes, per node, how many of its commands were applied in a
// different log order than their callers called (callers racing to the
// node: not a fault) and than the node proposed them (which L2 says never
// happens): counted over consecutive commands in call, resp. proposal,
// order.
func (p *StageProbe) OrderReport(w io.Writer) {
	type cmd struct {
		index      uint64
		call, prop time.Duration
	}
	per := map[uint64][]cmd{}
	for i := uint64(1); i < p.cap; i++ {
		if o := p.owner[i].Load(); o != 0 {
			per[o] = append(per[o], cmd{i, p.get(o, i, stageCalled), p.get(o, i, stageProposed)})
		}
	}
	for node := uint64(1); node <= maxStageNodes; node++ {
		cs := per[node]
		if len(cs) == 0 {
			continue
		}
		inversions := func(key func(cmd) time.Duration) int {
			sorted := slices.Clone(cs)
			slices.SortStableFunc(sorted, func(a, b cmd) int { return cmp.Compare(key(a), key(b)) })
			n := 0
			for k := 1; k < len(sorted); k++ {
				if key(sorted[k]) != key(sorted[k-1]) && sorted[k].index < sorted[k-1].index {
					n++
				}
			}
			return n
		}
		fmt.Fprintf(w, "node %d: %d commands; log order differs from call order %d times, from proposal order %d times\n",
			node, len(cs), inversions(func(c cmd) time.Duration { return c.call }),
			inversions(func(c cmd) time.Duration { return c.prop }))
	}
}
