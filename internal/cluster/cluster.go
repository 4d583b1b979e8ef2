// Package cluster is lockraft's one cluster harness: N members with real
// bbolt files in their own data directories, over either real gRPC on
// loopback or the in-memory network of internal/simnet, with faults
// injected through each member's seams (internal/faults): partitions,
// one-way cuts, bridges, message loss, duplication and delay, a paused
// process, failing disks, crash (kill -9) and restart, and clocks whose
// rate, monotonic and wall readings can be faulted apart.
//
// The harness does not know what a member is: the caller's Start function
// turns a Spec into a running member (a *node.Node, a *lockraft.Node, …).
// node's tests, the root package's tests and the fault checker all start
// their members through it.
//
// On the in-memory network and inside testing/synctest, with a seeded
// crypto/rand (testing/cryptotest) and one P (GOMAXPROCS=1), a run is
// deterministic: the same seed gives the same schedule and the same outcome
// (see Sim).
package cluster

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/lockraft/lockraft/internal/faults"
	"github.com/lockraft/lockraft/internal/knobs"
	"github.com/lockraft/lockraft/internal/simnet"
	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/transport"
)

// Member is what the harness needs of a running member: the leader's raft
// id as the member last saw it (0: none). To stop it the harness calls its
// Crash() if it has one (no cleanup, as kill -9), else its
// Close(context.Context) error.
type Member interface {
	Leader() uint64
}

type crasher interface{ Crash() }

type closer interface {
	Close(context.Context) error
}

// kill stops m: Crash if it can, else Close.
func kill(m Member) {
	switch m := m.(type) {
	case crasher:
		m.Crash()
	case closer:
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	}
}

// Peer is one founding member: its raft id and the address it listens on.
type Peer struct {
	ID   uint64
	Addr string
}

// Spec is what one incarnation of a member is started with.
type Spec struct {
	ID          uint64
	Incarnation int    // 1 for the first start, then one more per restart
	Dir         string // its data directory (kept across restarts)
	Peers       []Peer // every founding member, itself included (not with Options.Gossip)
	Addr        string // the address its peers reach it at ("" with Options.Gossip)
	// Seeds are the gossip addresses of the members running now, for a
	// gossip-mode member to join through (Options.Gossip; members that
	// have a GossipAddr() string method).
	Seeds []string
	// Listener is the bound gRPC listener on Addr (nil on the in-memory
	// network). The member owns it.
	Listener net.Listener
	// Clock is its clock: a SkewClock over real time, or a PhasedClock in
	// the simulation.
	Clock Clock
	// Knobs carry its network (gRPC or in-memory) and disk seams, already
	// wrapped by its Faults; the Start function may plant bugs in them.
	Knobs *knobs.Node
	// Logger is the harness's logger for this incarnation.
	Logger *slog.Logger
}

// Options configure a Cluster.
type Options[M Member] struct {
	Size int    // members (default 3)
	Dir  string // base directory; each member gets Dir/n<id>. Required.
	Seed uint64 // seeds the simulation's network and the listeners' degradation
	// Sim runs the members on one in-memory network (internal/simnet)
	// instead of gRPC on loopback. SimPolicy is its default link policy.
	Sim       bool
	SimPolicy simnet.Policy
	// SimTrace, if set, is told every event of the simulation's network
	// (simnet.WithTrace): for finding where two runs of a seed part.
	SimTrace func(simnet.Event)
	// Gossip: members find each other by gossip, so the harness binds no
	// listener for them (a member listens where it chooses) and gives each
	// start the running members' gossip addresses (Spec.Seeds). A member
	// then picks its own raft id, and the cuts (Partition, Isolate, CutOff,
	// Cut, OneWay, Bridge), which block the harness's ids as raft ids, miss
	// it: block its peers' raft ids through Faults(id) instead.
	Gossip bool
	// Initial is how many members (ids 1..Initial) Start starts; the others
	// wait for StartMember or StartVia (default Size; negative: none).
	Initial int
	// Start starts one incarnation of a member. Required.
	Start func(Spec) (M, error)
	// Logger receives the harness's own lines and is given to members
	// (default: discarded).
	Logger *slog.Logger
}

// Cluster is N members and their faults. Safe for concurrent use.
type Cluster[M Member] struct {
	opts   Options[M]
	ids    []uint64
	dirs   map[uint64]string
	addrs  map[uint64]string
	peers  []Peer
	faults map[uint64]*faults.Faults
	clocks map[uint64]Clock
	netems map[uint64]*netem
	net    *simnet.Network // nil over gRPC

	mu      sync.Mutex
	members map[uint64]M
	running map[uint64]bool
	paused  map[uint64]chan struct{}
	disk    map[uint64]bool // disk faults injected (FailDisk) not yet repaired
	incarn  map[uint64]int
	gen     map[uint64]int // data directory generation (StartFresh)
	log     *slog.Logger
}

// Start binds a listener per member first (over gRPC), then starts every
// member. On an error every member started so far is crashed.
func Start[M Member](opts Options[M]) (*Cluster[M], error) {
	if opts.Size == 0 {
		opts.Size = 3
	}
	if opts.Dir == "" || opts.Start == nil {
		return nil, errors.New("cluster: Options.Dir and Options.Start are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster[M]{
		opts: opts, dirs: map[uint64]string{}, addrs: map[uint64]string{},
		faults: map[uint64]*faults.Faults{}, clocks: map[uint64]Clock{}, netems: map[uint64]*netem{},
		members: map[uint64]M{}, running: map[uint64]bool{}, paused: map[uint64]chan struct{}{},
		disk: map[uint64]bool{}, incarn: map[uint64]int{}, gen: map[uint64]int{}, log: opts.Logger,
	}
	switch {
	case opts.Initial == 0:
		opts.Initial = opts.Size
	case opts.Initial < 0:
		opts.Initial = 0
	}
	c.opts.Initial = opts.Initial
	if opts.Sim {
		sopts := []simnet.Option{simnet.WithPolicy(opts.SimPolicy)}
		if opts.SimTrace != nil {
			sopts = append(sopts, simnet.WithTrace(opts.SimTrace))
		}
		c.net = simnet.New(opts.Seed, sopts...)
	}
	lns := map[uint64]net.Listener{}
	for i := 1; i <= opts.Size; i++ {
		id := uint64(i)
		c.ids = append(c.ids, id)
		c.dirs[id] = filepath.Join(opts.Dir, fmt.Sprintf("n%d", id))
		c.faults[id] = &faults.Faults{}
		switch {
		case opts.Sim:
			c.addrs[id] = simnet.Addr(id)
			c.clocks[id] = NewPhasedClock(phaseOf(opts.Seed, id))
		case opts.Gossip:
			c.clocks[id] = NewSkewClock()
		default:
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				for _, l := range lns {
					l.Close()
				}
				return nil, err
			}
			lns[id] = ln
			c.addrs[id] = ln.Addr().String()
			c.clocks[id] = NewSkewClock()
			c.netems[id] = newNetem(opts.Seed*31 + id)
		}
		c.peers = append(c.peers, Peer{ID: id, Addr: c.addrs[id]})
	}
	for _, id := range c.ids[:opts.Initial] {
		if err := c.start(id, lns[id], c.seeds()); err != nil {
			for _, l := range lns {
				l.Close()
			}
			c.Stop()
			return nil, err
		}
		delete(lns, id)
	}
	for _, l := range lns { // members that wait for StartMember bind again then
		l.Close()
	}
	return c, nil
}

// phaseOf is a member's tick phase in the simulation: distinct per member
// and seed, so that no two members' tickers fire at the same instant.
func phaseOf(seed, id uint64) time.Duration {
	x := seed*0x9e3779b97f4a7c15 + id*0xbf58476d1ce4e5b9
	x ^= x >> 31
	return time.Duration(id)*time.Millisecond + time.Duration(x%997)*time.Microsecond
}

// IDs lists the members' ids.
func (c *Cluster[M]) IDs() []uint64 { return slices.Clone(c.ids) }

// Dir is a member's data directory (its current one: see StartFresh).
func (c *Cluster[M]) Dir(id uint64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dirs[id]
}

// Addr is the address a member is reached at.
func (c *Cluster[M]) Addr(id uint64) string { return c.addrs[id] }

// Peers lists every member's id and address.
func (c *Cluster[M]) Peers() []Peer { return slices.Clone(c.peers) }

// Faults is a member's fault state (network blocks, message policy over
// gRPC, pause, disk).
func (c *Cluster[M]) Faults(id uint64) *faults.Faults { return c.faults[id] }

// Clock is a member's clock.
func (c *Cluster[M]) Clock(id uint64) Clock { return c.clocks[id] }

// Net is the simulation's network (nil over gRPC).
func (c *Cluster[M]) Net() *simnet.Network { return c.net }

// Sim reports whether the members run on the in-memory network.
func (c *Cluster[M]) Sim() bool { return c.net != nil }

// start starts an incarnation of member id on ln (nil: none) with the
// given gossip seeds.
func (c *Cluster[M]) start(id uint64, ln net.Listener, seeds []string) error {
	c.mu.Lock()
	c.incarn[id]++
	inc := c.incarn[id]
	c.mu.Unlock()
	inner := transport.Start
	if c.net != nil {
		inner = c.net.Start
	}
	spec := Spec{
		ID: id, Incarnation: inc, Dir: c.Dir(id), Peers: slices.Clone(c.peers), Addr: c.addrs[id], Seeds: seeds,
		Clock: c.clocks[id], Knobs: c.faults[id].Knobs(&knobs.Node{Network: inner}),
		Logger: c.log.With("n", views.MemberID(id), "inc", inc),
	}
	if ln != nil {
		spec.Listener = netemListener{ln, c.netems[id]}
	}
	m, err := c.opts.Start(spec)
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return fmt.Errorf("start member %016x: %w", id, err)
	}
	c.mu.Lock()
	c.members[id] = m
	c.running[id] = true
	c.mu.Unlock()
	return nil
}

// Node returns member id's latest incarnation and whether it runs. A
// member that stopped is returned as it was when it stopped (the zero M if
// it never started).
func (c *Cluster[M]) Node(id uint64) (M, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[id], c.running[id]
}

// Member returns the running incarnation of member id, or the zero M (nil
// for a pointer) if it does not run.
func (c *Cluster[M]) Member(id uint64) M {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running[id] {
		var zero M
		return zero
	}
	return c.members[id]
}

// All yields every running member and its id, in id order. The members are
// those running when the loop begins: a member started or stopped by the
// loop's body is not seen.
func (c *Cluster[M]) All() iter.Seq2[uint64, M] {
	return func(yield func(uint64, M) bool) {
		c.mu.Lock()
		var ids []uint64
		var ms []M
		for _, id := range c.ids {
			if c.running[id] {
				ids = append(ids, id)
				ms = append(ms, c.members[id])
			}
		}
		c.mu.Unlock()
		for i, id := range ids {
			if !yield(id, ms[i]) {
				return
			}
		}
	}
}

// Running lists the ids of the members that run.
func (c *Cluster[M]) Running() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []uint64
	for _, id := range c.ids {
		if c.running[id] {
			ids = append(ids, id)
		}
	}
	return ids
}

// Incarnation counts the starts of member id.
func (c *Cluster[M]) Incarnation(id uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.incarn[id]
}

// Crash kills a member without cleanup (kill -9).
func (c *Cluster[M]) Crash(id uint64) {
	c.mu.Lock()
	m, ok := c.members[id], c.running[id]
	c.running[id] = false
	c.mu.Unlock()
	if ok {
		c.log.Info("crash", "n", views.MemberID(id))
		kill(m)
	}
}

// Crashed reports whether member id is down.
func (c *Cluster[M]) Crashed(id uint64) bool {
	_, ok := c.Node(id)
	return !ok
}

// Stopped marks member id as down after the caller stopped it another way
// (Close, Leave), so that Restart starts it again.
func (c *Cluster[M]) Stopped(id uint64) {
	c.mu.Lock()
	c.running[id] = false
	c.mu.Unlock()
}

// seeds are the gossip addresses of the running members.
func (c *Cluster[M]) seeds() []string {
	if !c.opts.Gossip {
		return nil
	}
	var out []string
	for _, id := range c.Running() {
		m, _ := c.Node(id)
		if g, ok := any(m).(interface{ GossipAddr() string }); ok {
			out = append(out, g.GossipAddr())
		}
	}
	slices.Sort(out)
	return out
}

// StartFresh starts member id with a new, empty data directory: a new
// member in the same slot (a pod whose volume was replaced). It crashes a
// running incarnation first.
func (c *Cluster[M]) StartFresh(id uint64) error {
	c.Crash(id)
	c.mu.Lock()
	c.gen[id]++
	c.dirs[id] = filepath.Join(c.opts.Dir, fmt.Sprintf("n%d-g%d", id, c.gen[id]))
	c.mu.Unlock()
	return c.Restart(id)
}

// Restart starts a crashed member again from its data directory, on its
// old address. (StartMember is the same, for a member not started yet.)
// A gossip-mode member joins through the running members' addresses.
func (c *Cluster[M]) Restart(id uint64) error {
	return c.restart(id, c.seeds())
}

// StartVia starts member id (if it does not run) as StartMember or Restart
// do, except that a gossip-mode member (Options.Gossip) joins through the
// given seeds rather than the running members' addresses; with none it
// starts alone. Seeds may be anybody's: another cluster's members too.
func (c *Cluster[M]) StartVia(id uint64, seeds ...string) error {
	return c.restart(id, slices.Clone(seeds))
}

func (c *Cluster[M]) restart(id uint64, seeds []string) error {
	if !c.Crashed(id) {
		return nil
	}
	var ln net.Listener
	if c.net == nil && !c.opts.Gossip {
		var err error
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if ln, err = net.Listen("tcp", c.addrs[id]); err == nil {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("rebind %s: %w", c.addrs[id], err)
		}
	}
	c.log.Info("restart", "n", views.MemberID(id))
	return c.start(id, ln, seeds)
}

// StartMember starts a member that Options.Initial left out (or restarts
// one).
func (c *Cluster[M]) StartMember(id uint64) error { return c.Restart(id) }

// WipeLockTable deletes a crashed member's lock-table file so that its
// restart rebuilds the table by replaying the raft log.
func (c *Cluster[M]) WipeLockTable(id uint64) error {
	if !c.Crashed(id) {
		return fmt.Errorf("member %016x is running", id)
	}
	return os.Remove(filepath.Join(c.dirs[id], "locks.db"))
}

// Leader returns a leader id that a running member reports (0 if none).
func (c *Cluster[M]) Leader() uint64 {
	for _, id := range c.ids {
		if m, ok := c.Node(id); ok {
			if l := m.Leader(); l != 0 {
				return l
			}
		}
	}
	return 0
}

// WaitLeader waits until every running member agrees on a running leader.
func (c *Cluster[M]) WaitLeader(ctx context.Context) (uint64, error) {
	for {
		if lead := c.agreedLeader(); lead != 0 {
			return lead, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no agreed leader: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (c *Cluster[M]) agreedLeader() uint64 {
	var lead uint64
	for _, id := range c.ids {
		m, ok := c.Node(id)
		if !ok {
			continue
		}
		l := m.Leader()
		if l == 0 || (lead != 0 && l != lead) {
			return 0
		}
		lead = l
	}
	if lead == 0 || c.Crashed(lead) {
		return 0
	}
	return lead
}

// HealAll ends every fault (network, pauses, clock rates, disks) and
// restarts crashed members.
func (c *Cluster[M]) HealAll() error {
	c.Heal()
	for _, id := range c.ids {
		c.Resume(id)
		if sc, ok := c.clocks[id].(*SkewClock); ok {
			sc.SetRate(1)
		}
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

// Stop crashes every member (end of a run). Members without Crash are
// closed all at once, since a Close waits for a quorum that members closed
// before it would no longer make.
func (c *Cluster[M]) Stop() {
	var wg sync.WaitGroup
	for _, id := range c.ids {
		c.Resume(id)
		if m, ok := c.Node(id); ok {
			if _, crashes := any(m).(crasher); !crashes {
				wg.Go(func() { c.Crash(id) })
				continue
			}
		}
		c.Crash(id)
	}
	wg.Wait()
}

// Close is Stop, and closes the in-memory network for good.
func (c *Cluster[M]) Close() {
	c.Stop()
	if c.net != nil {
		c.net.Close()
	}
}

// LANPolicy is a simulated LAN: every message and call takes 0.1–2 ms.
var LANPolicy = simnet.Policy{MinDelay: 100 * time.Microsecond, MaxDelay: 2 * time.Millisecond}
