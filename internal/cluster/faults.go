package cluster

import (
	"errors"
	"time"

	"github.com/lockraft/lockraft/internal/faults"
	"github.com/lockraft/lockraft/internal/simnet"
	"github.com/lockraft/lockraft/internal/views"
)

// Partition splits the members into groups that cannot reach each other;
// members in no group end up alone. It replaces any earlier cut.
func (c *Cluster[M]) Partition(groups ...[]uint64) {
	c.healCuts()
	group := map[uint64]int{}
	for i, g := range groups {
		for _, id := range g {
			group[id] = i + 1
		}
	}
	for _, a := range c.ids {
		for _, b := range c.ids {
			if a != b && (group[a] == 0 || group[a] != group[b]) {
				c.faults[a].BlockOut(b)
				c.faults[a].BlockIn(b)
			}
		}
	}
	c.log.Info("partition", "groups", memberGroups(groups))
}

// Isolate cuts one member off from all others.
func (c *Cluster[M]) Isolate(id uint64) {
	var rest []uint64
	for _, x := range c.ids {
		if x != id {
			rest = append(rest, x)
		}
	}
	c.Partition([]uint64{id}, rest)
}

// CutOff cuts member id off from every other member, both ways, and leaves
// the other cuts as they are (Isolate replaces them): members cut off one
// after another are each alone. Unisolate undoes it.
func (c *Cluster[M]) CutOff(id uint64) {
	for _, other := range c.ids {
		if other == id {
			continue
		}
		c.faults[id].BlockOut(other)
		c.faults[id].BlockIn(other)
		c.faults[other].BlockOut(id)
		c.faults[other].BlockIn(id)
	}
	c.log.Info("cut off", "n", views.MemberID(id))
}

// Unisolate undoes Isolate(id) or CutOff(id) alone, except towards keep (still cut off;
// 0: none).
func (c *Cluster[M]) Unisolate(id, keep uint64) {
	for _, other := range c.ids {
		if other == id || other == keep {
			continue
		}
		c.faults[other].UnblockOut(id)
		c.faults[other].UnblockIn(id)
		c.faults[id].UnblockOut(other)
		c.faults[id].UnblockIn(other)
	}
}

// Cut cuts the link between a and b both ways.
func (c *Cluster[M]) Cut(a, b uint64) {
	c.OneWay(a, b)
	c.OneWay(b, a)
}

// OneWay drops everything from → to (but not to → from).
func (c *Cluster[M]) OneWay(from, to uint64) {
	c.faults[from].BlockOut(to)
	c.faults[to].BlockIn(from)
	c.log.Info("one-way cut", "from", views.MemberID(from), "to", views.MemberID(to))
}

// Bridge splits the others into two halves that cannot talk to each other
// while the bridge member talks to both.
func (c *Cluster[M]) Bridge(bridge uint64) {
	c.healCuts()
	var rest []uint64
	for _, x := range c.ids {
		if x != bridge {
			rest = append(rest, x)
		}
	}
	a, b := rest[:len(rest)/2], rest[len(rest)/2:]
	for _, x := range a {
		for _, y := range b {
			c.Cut(x, y)
		}
	}
	c.log.Info("bridge", "n", views.MemberID(bridge), "halves", memberGroups([][]uint64{a, b}))
}

func (c *Cluster[M]) healCuts() {
	for _, id := range c.ids {
		c.faults[id].Heal()
	}
}

// Heal removes every cut, message policy and listener degradation.
func (c *Cluster[M]) Heal() {
	c.healCuts()
	for _, id := range c.ids {
		c.faults[id].SetMessagePolicy(faults.MessagePolicy{})
		if e := c.netems[id]; e != nil {
			e.set(0, 0)
		}
	}
	if c.net != nil {
		c.net.SetPolicy(c.opts.SimPolicy)
	}
}

// SetMessagePolicy drops, duplicates and delays single messages and calls
// that member id sends. In the simulation it becomes the link policy of
// every link from id (a delayed share becomes the reordered share).
func (c *Cluster[M]) SetMessagePolicy(id uint64, p faults.MessagePolicy) {
	if c.net != nil {
		lp := c.opts.SimPolicy
		lp.Drop, lp.Duplicate, lp.Reorder = p.DropRate, p.DupRate, p.DelayRate
		lp.MaxDelay = max(lp.MaxDelay, p.DelayMax)
		for _, to := range c.ids {
			if to != id && (len(p.Peers) == 0 || contains(p.Peers, to)) {
				c.net.SetLinkPolicy(id, to, lp)
			}
		}
	} else {
		c.faults[id].SetMessagePolicy(p)
	}
	c.log.Info("message policy", "from", views.MemberID(id), "drop", p.DropRate, "dup", p.DupRate, "delay", p.DelayRate,
		"delay_max", p.DelayMax)
}

func contains(ids []uint64, id uint64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// SetSimPolicy sets the simulation's link policy for every link (no-op
// over gRPC).
func (c *Cluster[M]) SetSimPolicy(p simnet.Policy) {
	if c.net != nil {
		c.net.SetPolicy(p)
	}
}

// ErrInjectedDisk is the error injected disk faults fail with.
var ErrInjectedDisk = errors.New("cluster: injected disk failure")

// FailDisk makes member id's raft log writes (raftLog) or its lock-table
// commits fail from now on: it must stop serving. RepairDisk (or HealAll)
// replaces the disk and restarts it.
func (c *Cluster[M]) FailDisk(id uint64, raftLog bool) {
	c.mu.Lock()
	c.disk[id] = true
	c.mu.Unlock()
	if raftLog {
		c.faults[id].FailWrites(ErrInjectedDisk)
	} else {
		c.faults[id].FailCommits(ErrInjectedDisk)
	}
	c.log.Info("disk fails", "n", views.MemberID(id), "raft_log", raftLog)
}

// RepairDisk crashes a member whose disk failed, heals the disk and
// restarts it from what it had made durable.
func (c *Cluster[M]) RepairDisk(id uint64) error {
	c.mu.Lock()
	failed := c.disk[id]
	delete(c.disk, id)
	c.mu.Unlock()
	if !failed {
		return nil
	}
	c.Crash(id)
	c.faults[id].FailWrites(nil)
	c.faults[id].FailCommits(nil)
	return c.Restart(id)
}

// Degrade delays every read of the member's accepted connections by delay
// and resets them with probability resetPPM per million reads (gRPC only).
func (c *Cluster[M]) Degrade(id uint64, delay time.Duration, resetPPM uint32) {
	if e := c.netems[id]; e != nil {
		e.set(delay, resetPPM)
		c.log.Info("degrade", "n", views.MemberID(id), "delay", delay, "reset_ppm", resetPPM)
	}
}

// Pause freezes a member's loop, log writes and keepalives (SIGSTOP); its
// clients wait on PauseGate.
func (c *Cluster[M]) Pause(id uint64) {
	c.mu.Lock()
	if c.paused[id] == nil {
		c.paused[id] = make(chan struct{})
	}
	c.mu.Unlock()
	c.faults[id].Pause()
	c.log.Info("pause", "n", views.MemberID(id))
}

// Resume ends a Pause.
func (c *Cluster[M]) Resume(id uint64) {
	c.faults[id].Resume()
	c.mu.Lock()
	if p := c.paused[id]; p != nil {
		close(p)
		delete(c.paused, id)
	}
	c.mu.Unlock()
}

// PauseGate returns a channel that is closed when the member is not paused
// (nil: not paused). Clients of a paused member wait on it, as the threads
// of a stopped process would.
func (c *Cluster[M]) PauseGate(id uint64) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paused[id]
}

// skew is member id's SkewClock (clock faults need one; the simulation's
// phased clocks have none).
func (c *Cluster[M]) skew(id uint64) *SkewClock {
	sc, _ := c.clocks[id].(*SkewClock)
	return sc
}

// ClockJump moves a member's monotonic clock (and its wall clock with it)
// forward by d.
func (c *Cluster[M]) ClockJump(id uint64, d time.Duration) {
	if sc := c.skew(id); sc != nil {
		sc.Jump(d)
		c.log.Info("clock jumps", "n", views.MemberID(id), "by", d)
	}
}

// WallStep steps a member's wall clock by d (forward or backward) and
// leaves its monotonic clock alone, as an NTP step or a VM resume does.
func (c *Cluster[M]) WallStep(id uint64, d time.Duration) {
	if sc := c.skew(id); sc != nil {
		sc.StepWall(d)
		c.log.Info("wall clock steps", "n", views.MemberID(id), "by", d, "offset", sc.WallOffset())
	}
}

// ClockRate sets a member's clock rate factor.
func (c *Cluster[M]) ClockRate(id uint64, r float64) {
	if sc := c.skew(id); sc != nil {
		sc.SetRate(r)
		c.log.Info("clock rate", "n", views.MemberID(id), "rate", r)
	}
}

// memberGroups is groups of member ids as log lines show them (hex).
func memberGroups(groups [][]uint64) [][]views.MemberID {
	out := make([][]views.MemberID, len(groups))
	for i, g := range groups {
		out[i] = views.MemberIDs(g)
	}
	return out
}
