// Package chaos is lockraft's fault checker: it runs a real cluster (real
// bbolt files, real gRPC on loopback) under a seeded fault schedule with
// clients on every node, records a history of lock operations and checks it:
// porcupine with a mutex model per name, a fencing-token store, token order
// in the applied log, nothing left behind and identical lock tables at the
// end, and no acknowledged grant lost across a restart of every node.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/lockraft/lockraft/internal/faults"
	"github.com/lockraft/lockraft/internal/knobs"
	"github.com/lockraft/lockraft/node"
)

// Options configures a Cluster.
type Options struct {
	Size    int
	BaseDir string // data directories go below it
	Seed    uint64
	Logger  *slog.Logger
	Tune    func(*node.Config) // after the fast defaults
	Plant   func(*knobs.Node)  // planted bugs, on every node
}

// Cluster is N real lockraft nodes with per-node fault knobs: network
// blocks (faults.Faults), pause, a skewable clock and a degraded listener.
type Cluster struct {
	opts    Options
	ids     []uint64
	dirs    map[uint64]string
	addrs   map[uint64]string
	members []node.Member
	faults  map[uint64]*faults.Faults
	clocks  map[uint64]*SkewClock
	netems  map[uint64]*netem
	Applied *AppliedLog

	mu     sync.Mutex
	nodes  map[uint64]*node.Node // nil while crashed
	paused map[uint64]chan struct{}
	disk   map[uint64]bool // disk faults injected (FailDisk) not yet repaired
	incarn map[uint64]int
	drift  float64       // node.Config.DriftRatio after Tune (0: not started yet)
	ttl    time.Duration // node.Config.SessionTTL after Tune
	logf   func(format string, a ...any)
}

// FastConfig is the timing the checker runs with: 20 ms ticks, 200 ms
// election timeout, 2 s session TTL.
func FastConfig(c *node.Config) {
	c.TickInterval = 20 * time.Millisecond
	c.ElectionTicks = 10
	c.HeartbeatTicks = 1
	c.SessionTTL = 2 * time.Second
	c.KeepaliveInterval = 100 * time.Millisecond
	// TryLock's default bound (2 election timeouts, 400 ms here) is shorter
	// than a loaded test machine's stalls; TestClusterThatCannotServe
	// checks the default.
	c.TryLockTimeout = 2 * time.Second
	c.SnapshotEvery = 1 << 40 // keep the whole log: the end check replays it
	c.CompactKeep = 1000
}

// NewCluster binds a listener per node first, then starts every node.
func NewCluster(opts Options, logf func(string, ...any)) (*Cluster, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{
		opts: opts, dirs: map[uint64]string{}, addrs: map[uint64]string{},
		faults: map[uint64]*faults.Faults{}, clocks: map[uint64]*SkewClock{}, netems: map[uint64]*netem{},
		nodes: map[uint64]*node.Node{}, paused: map[uint64]chan struct{}{}, incarn: map[uint64]int{},
		disk:    map[uint64]bool{},
		Applied: NewAppliedLog(), logf: logf,
	}
	lns := map[uint64]net.Listener{}
	for i := 1; i <= opts.Size; i++ {
		id := uint64(i)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns[id] = ln
		c.ids = append(c.ids, id)
		c.addrs[id] = ln.Addr().String()
		c.dirs[id] = filepath.Join(opts.BaseDir, fmt.Sprintf("n%d", id))
		c.members = append(c.members, node.Member{ID: id, Addr: c.addrs[id]})
		c.faults[id] = &faults.Faults{}
		c.clocks[id] = NewSkewClock()
		c.netems[id] = newNetem(opts.Seed*31 + id)
	}
	for _, id := range c.ids {
		if err := c.start(id, lns[id]); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// IDs lists the node ids.
func (c *Cluster) IDs() []uint64 { return slices.Clone(c.ids) }

// Dir is a node's data directory.
func (c *Cluster) Dir(id uint64) string { return c.dirs[id] }

func (c *Cluster) start(id uint64, ln net.Listener) error {
	c.mu.Lock()
	c.incarn[id]++
	inc := c.incarn[id]
	c.mu.Unlock()
	cfg := node.Config{
		ID: id, ClusterID: "chaos", DataDir: c.dirs[id], Members: c.members,
		Listener: netemListener{ln, c.netems[id]},
		Clock:    c.clocks[id],
		Logger:   c.opts.Logger.With("n", id, "inc", inc),
		Observer: func(r node.ApplyRecord) { c.Applied.Observe(id, inc, r) },
	}
	FastConfig(&cfg)
	if c.opts.Tune != nil {
		c.opts.Tune(&cfg)
	}
	k := c.faults[id].Knobs(nil)
	if c.opts.Plant != nil {
		c.opts.Plant(k)
	}
	knobs.Plant(&cfg, k)
	c.mu.Lock()
	c.drift, c.ttl = cfg.DriftRatio, cfg.SessionTTL
	if c.drift == 0 {
		c.drift = node.DefaultDriftRatio
	}
	c.mu.Unlock()
	n, err := node.Start(cfg)
	if err != nil {
		ln.Close()
		return fmt.Errorf("start node %d: %w", id, err)
	}
	c.mu.Lock()
	c.nodes[id] = n
	c.mu.Unlock()
	return nil
}

// Node returns the running incarnation of id, or nil while it is crashed.
func (c *Cluster) Node(id uint64) *node.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// Incarnation counts the starts of node id.
func (c *Cluster) Incarnation(id uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.incarn[id]
}

// PauseGate returns a channel that is closed when the node is not paused
// (nil means not paused). Clients of a paused node wait on it, as the
// threads of a SIGSTOPped process would.
func (c *Cluster) PauseGate(id uint64) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paused[id]
}

// Crash kills a node without cleanup (kill -9).
func (c *Cluster) Crash(id uint64) {
	c.mu.Lock()
	n := c.nodes[id]
	c.nodes[id] = nil
	c.mu.Unlock()
	if n != nil {
		c.logf("crash n%d", id)
		n.Crash()
	}
}

// Crashed reports whether node id is down.
func (c *Cluster) Crashed(id uint64) bool { return c.Node(id) == nil }

// Restart starts a crashed node again from its data directory on its old
// address.
func (c *Cluster) Restart(id uint64) error {
	if c.Node(id) != nil {
		return nil
	}
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ln, err = net.Listen("tcp", c.addrs[id]); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("rebind %s: %w", c.addrs[id], err)
	}
	c.logf("restart n%d", id)
	return c.start(id, ln)
}

// WipeLockTable deletes a crashed node's lock-table file so that its restart
// rebuilds the table by replaying the raft log (the Observer then sees every
// entry again).
func (c *Cluster) WipeLockTable(id uint64) error {
	if c.Node(id) != nil {
		return fmt.Errorf("node %d is running", id)
	}
	return os.Remove(filepath.Join(c.dirs[id], "locks.db"))
}

// Partition splits the nodes into groups that cannot reach each other. Nodes
// in no group end up alone.
func (c *Cluster) Partition(groups ...[]uint64) {
	c.Heal()
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
	c.logf("partition %v", groups)
}

// Isolate cuts one node off from all others.
func (c *Cluster) Isolate(id uint64) {
	var rest []uint64
	for _, x := range c.ids {
		if x != id {
			rest = append(rest, x)
		}
	}
	c.Partition([]uint64{id}, rest)
}

// OneWay drops everything from -> to (but not to -> from).
func (c *Cluster) OneWay(from, to uint64) {
	c.faults[from].BlockOut(to)
	c.faults[to].BlockIn(from)
	c.logf("one-way %d -> %d blocked", from, to)
}

// Bridge splits the others into two halves that cannot talk to each other
// while the bridge node talks to both.
func (c *Cluster) Bridge(bridge uint64) {
	c.Heal()
	var rest []uint64
	for _, x := range c.ids {
		if x != bridge {
			rest = append(rest, x)
		}
	}
	a, b := rest[:len(rest)/2], rest[len(rest)/2:]
	for _, x := range a {
		for _, y := range b {
			c.faults[x].BlockOut(y)
			c.faults[x].BlockIn(y)
			c.faults[y].BlockOut(x)
			c.faults[y].BlockIn(x)
		}
	}
	c.logf("bridge n%d between %v and %v", bridge, a, b)
}

// Heal removes every network block, message policy and listener
// degradation.
func (c *Cluster) Heal() {
	for _, id := range c.ids {
		c.faults[id].Heal()
		c.faults[id].SetMessagePolicy(faults.MessagePolicy{})
		c.netems[id].set(0, 0)
	}
}

// SetMessagePolicy drops, duplicates and delays single messages and calls
// that node id sends.
func (c *Cluster) SetMessagePolicy(id uint64, p faults.MessagePolicy) {
	c.faults[id].SetMessagePolicy(p)
	c.logf("messages from n%d: drop=%.2f dup=%.2f delay=%.2f up to %v", id, p.DropRate, p.DupRate, p.DelayRate, p.DelayMax)
}

// ErrInjectedDisk is the error injected disk faults fail with.
var ErrInjectedDisk = errors.New("chaos: injected disk failure")

// FailDisk makes node id's raft log writes (raftLog) or its lock-table
// commits fail from now on: the node must stop serving. RepairDisk (or
// HealAll) replaces the disk and restarts the node.
func (c *Cluster) FailDisk(id uint64, raftLog bool) {
	c.mu.Lock()
	c.disk[id] = true
	c.mu.Unlock()
	if raftLog {
		c.faults[id].FailWrites(ErrInjectedDisk)
		c.logf("disk n%d: raft log writes fail", id)
	} else {
		c.faults[id].FailCommits(ErrInjectedDisk)
		c.logf("disk n%d: lock-table commits fail", id)
	}
}

// RepairDisk crashes a node whose disk failed, heals the disk and restarts
// it from what it had made durable.
func (c *Cluster) RepairDisk(id uint64) error {
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

// Degrade delays every read of the node's accepted connections by delay and
// resets them with probability resetPPM per million reads.
func (c *Cluster) Degrade(id uint64, delay time.Duration, resetPPM uint32) {
	c.netems[id].set(delay, resetPPM)
	c.logf("degrade n%d delay=%v reset=%dppm", id, delay, resetPPM)
}

// Pause freezes a node's loop, keepalives and its clients.
func (c *Cluster) Pause(id uint64) {
	c.mu.Lock()
	if c.paused[id] == nil {
		c.paused[id] = make(chan struct{})
	}
	c.mu.Unlock()
	c.faults[id].Pause()
	c.logf("pause n%d", id)
}

// Resume ends a Pause.
func (c *Cluster) Resume(id uint64) {
	c.faults[id].Resume()
	c.mu.Lock()
	if p := c.paused[id]; p != nil {
		close(p)
		delete(c.paused, id)
	}
	c.mu.Unlock()
}

// ClockJump moves a node's monotonic clock (and its wall clock with it)
// forward by d.
func (c *Cluster) ClockJump(id uint64, d time.Duration) {
	c.clocks[id].Jump(d)
	c.logf("clock n%d jumps %v", id, d)
}

// WallStep steps a node's wall clock by d (forward or backward) and leaves
// its monotonic clock alone, as an NTP step or a VM resume does.
func (c *Cluster) WallStep(id uint64, d time.Duration) {
	c.clocks[id].StepWall(d)
	c.logf("wall clock n%d steps %v (offset now %v)", id, d, c.clocks[id].WallOffset())
}

// SessionTTL is the nodes' configured node.Config.SessionTTL.
func (c *Cluster) SessionTTL() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ttl
}

// DriftRatio is the nodes' configured node.Config.DriftRatio: the bound on
// how far their monotonic clock rates may differ.
func (c *Cluster) DriftRatio() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.drift
}

// ClockRate sets a node's clock rate factor.
func (c *Cluster) ClockRate(id uint64, r float64) {
	c.clocks[id].SetRate(r)
	c.logf("clock n%d rate %.3f", id, r)
}

// Leader returns a leader id that a running node reports (0 if none).
func (c *Cluster) Leader() uint64 {
	for _, id := range c.ids {
		if n := c.Node(id); n != nil {
			if l := n.Leader(); l != 0 {
				return l
			}
		}
	}
	return 0
}

// WaitLeader waits until every running node agrees on a running leader.
func (c *Cluster) WaitLeader(ctx context.Context) (uint64, error) {
	for {
		var lead uint64
		ok := true
		for _, id := range c.ids {
			n := c.Node(id)
			if n == nil {
				continue
			}
			l := n.Leader()
			if l == 0 || (lead != 0 && l != lead) {
				ok = false
				break
			}
			lead = l
		}
		if ok && lead != 0 && c.Node(lead) != nil {
			return lead, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no agreed leader: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// HealAll ends every fault: network, pauses, clock rates; restarts crashed
// nodes.
func (c *Cluster) HealAll() error {
	c.Heal()
	for _, id := range c.ids {
		c.Resume(id)
		c.clocks[id].SetRate(1)
	}
	for _, id := range c.ids {
		if err := c.RepairDisk(id); err != nil {
			return err
		}
		if err := c.Restart(id); err != nil {
			return err
		}
	}
	return nil
}

// Stop crashes every node (end of run).
func (c *Cluster) Stop() {
	for _, id := range c.ids {
		c.Resume(id)
		c.Crash(id)
	}
}
