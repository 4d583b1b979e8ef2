// Package chaos is lockraft's fault checker: it runs a real cluster (real
// bbolt files, real gRPC on loopback, or the in-memory network of the
// deterministic simulation) under a seeded fault schedule with clients on
// every node, records a history of lock operations and checks it: porcupine
// with a model per name and primitive, a fencing-token store, token order in
// the applied log, nothing left behind and identical lock tables at the
// end, and no acknowledged grant lost across a restart of every node.
package chaos

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/lockraft/lockraft/internal/cluster"
	"github.com/lockraft/lockraft/internal/knobs"
	"github.com/lockraft/lockraft/internal/simnet"
	"github.com/lockraft/lockraft/node"
)

// Options configures a Cluster.
type Options struct {
	Size    int
	BaseDir string // data directories go below it
	Seed    uint64
	// Sim runs the nodes on the in-memory network (internal/simnet);
	// deterministic inside testing/synctest (sim.go).
	Sim      bool
	SimTrace func(simnet.Event)
	Logger   *slog.Logger
	Tune     func(*node.Config) // after the fast defaults
	Plant    func(*knobs.Node)  // planted bugs, on every node
}

// Cluster is N real lockraft nodes in the harness (internal/cluster), with
// the applied log every incarnation of every node observed.
type Cluster struct {
	*cluster.Cluster[*node.Node]
	Applied *AppliedLog

	mu    sync.Mutex
	drift float64       // node.Config.DriftRatio after Tune (0: not started yet)
	ttl   time.Duration // node.Config.SessionTTL after Tune
	et    time.Duration // the election timeout after Tune
	ka    time.Duration // node.Config.KeepaliveInterval after Tune
	logf  func(format string, a ...any)
}

// FastConfig is the timing the checker runs with: 20 ms ticks, 200 ms
// election timeout, 2 s session TTL; and sessions ending in runs of two.
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
	// Sessions end in runs of two names, so that the workload's sessions
	// (a few holds and waits each) end over several entries under every
	// fault, as only sessions of thousands of names do by default.
	c.SessionEndRun = 2
}

// NewCluster starts every node.
func NewCluster(opts Options, logf func(string, ...any)) (*Cluster, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{Applied: NewAppliedLog(), logf: logf}
	cl, err := cluster.Start(cluster.Options[*node.Node]{
		Size: opts.Size, Dir: opts.BaseDir, Seed: opts.Seed, Sim: opts.Sim, Logger: opts.Logger,
		SimPolicy: SimPolicy, SimTrace: opts.SimTrace,
		Start: func(s cluster.Spec) (*node.Node, error) {
			cfg := node.Config{
				ID: s.ID, ClusterID: "chaos", DataDir: s.Dir, Members: Members(s.Peers),
				Listener: s.Listener, Clock: s.Clock, Logger: s.Logger,
				Observer: func(r node.ApplyRecord) { c.Applied.Observe(s.ID, s.Incarnation, r) },
			}
			FastConfig(&cfg)
			if opts.Tune != nil {
				opts.Tune(&cfg)
			}
			if opts.Plant != nil {
				opts.Plant(s.Knobs)
			}
			knobs.Plant(&cfg, s.Knobs)
			c.mu.Lock()
			c.drift, c.ttl = cfg.DriftRatio, cfg.SessionTTL
			c.et, c.ka = time.Duration(cfg.ElectionTicks)*cfg.TickInterval, cfg.KeepaliveInterval
			if c.drift == 0 {
				c.drift = node.DefaultDriftRatio
			}
			c.mu.Unlock()
			return node.Start(cfg)
		},
	})
	if err != nil {
		return nil, err
	}
	c.Cluster = cl
	return c, nil
}

// SimPolicy is the simulation's network: every message and call takes
// 0.1–2 ms, as on a LAN.
var SimPolicy = cluster.LANPolicy

// Members turns the harness's peers into node.Members.
func Members(ps []cluster.Peer) []node.Member {
	ms := make([]node.Member, len(ps))
	for i, p := range ps {
		ms[i] = node.Member{ID: p.ID, Addr: p.Addr}
	}
	return ms
}

// Node returns the running incarnation of id, or nil while it is crashed.
func (c *Cluster) Node(id uint64) *node.Node {
	n, ok := c.Cluster.Node(id)
	if !ok {
		return nil
	}
	return n
}

// running reports whether id runs (is not crashed).
func (c *Cluster) running(id uint64) bool { return c.Node(id) != nil }

// Crash kills a node without cleanup (kill -9).
func (c *Cluster) Crash(id uint64) {
	c.logf("crash n%d", id)
	c.Cluster.Crash(id)
}

// Restart starts a crashed node again from its data directory.
func (c *Cluster) Restart(id uint64) error {
	if !c.Crashed(id) {
		return nil
	}
	c.logf("restart n%d", id)
	if err := c.Cluster.Restart(id); err != nil {
		return fmt.Errorf("restart n%d: %w", id, err)
	}
	return nil
}

// SessionTTL is the nodes' configured node.Config.SessionTTL.
func (c *Cluster) SessionTTL() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ttl
}

// ElectionTimeout is the nodes' base election timeout (ElectionTicks ×
// TickInterval).
func (c *Cluster) ElectionTimeout() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.et
}

// KeepaliveInterval is the nodes' configured node.Config.KeepaliveInterval.
func (c *Cluster) KeepaliveInterval() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ka
}

// DriftRatio is the nodes' configured node.Config.DriftRatio: the bound on
// how far their monotonic clock rates may differ.
func (c *Cluster) DriftRatio() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.drift
}
