package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/lockraft/lockraft/internal/certgen"
	"github.com/lockraft/lockraft/node"
	"github.com/lockraft/lockraft/transport"
)

// The lockraft system: a 3-node cluster in this process, real gRPC on
// loopback and real bbolt files with fsync, default timings (100 ms tick,
// election after 10 ticks). The node package is used directly because S4
// needs Crash (the public Node has only Close); Acquire/Release are what
// lockraft.Node.Lock and Lock.Unlock call.
//
// lockraft-mtls is the same cluster as deployed off loopback: mutual TLS
// between members, each with a certificate naming it, from one CA made for
// the run. (The bench's members are a static list, so there is no gossip to
// encrypt; gossip carries no lock traffic.)
func init() {
	for _, mtls := range []bool{false, true} {
		name := "lockraft"
		if mtls {
			name = "lockraft-mtls"
		}
		register(systemFactory{
			name:      name,
			available: func() error { return nil },
			start:     func(dir string, ttl time.Duration) (system, error) { return startLockraft(dir, ttl, mtls) },
			crashTakeover: func(dir string, ttl time.Duration) (time.Duration, error) {
				return lockraftCrashTakeover(dir, ttl, mtls)
			},
			failover: func(dir string, graceful bool) (time.Duration, error) { return lockraftFailover(dir, graceful, mtls) },
		})
	}
}

type lockraftCluster struct {
	nodes []*node.Node // index i is raft id i+1
}

func (*lockraftCluster) inProcess() {}

const benchClusterID = "bench"

// memberTLS makes a CA and a certificate for each of members 1..n.
func memberTLS(n int) ([]*transport.TLS, error) {
	from, until := time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	ca, err := certgen.NewCA("lockraft bench CA", from, until)
	if err != nil {
		return nil, err
	}
	var tl []*transport.TLS
	for id := uint64(1); id <= uint64(n); id++ {
		cert, key, err := ca.Member(benchClusterID, id, []string{"127.0.0.1"}, from, until)
		if err != nil {
			return nil, err
		}
		roots, c, err := ca.Material(cert, key)
		if err != nil {
			return nil, err
		}
		tl = append(tl, &transport.TLS{Roots: roots, Certificate: c})
	}
	return tl, nil
}

func startLockraft(dir string, ttl time.Duration, mtls bool) (*lockraftCluster, error) {
	var tl []*transport.TLS
	if mtls {
		var err error
		if tl, err = memberTLS(3); err != nil {
			return nil, err
		}
	}
	var members []node.Member
	var lns []net.Listener
	for id := uint64(1); id <= 3; id++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
		members = append(members, node.Member{ID: id, Addr: ln.Addr().String()})
	}
	c := &lockraftCluster{}
	for i, ln := range lns {
		cfg := node.Config{ID: uint64(i + 1), DataDir: filepath.Join(dir, fmt.Sprint(i+1)),
			Members: members, Listener: ln, SessionTTL: ttl, TickInterval: tickFor(ttl), Logger: slog.New(slog.DiscardHandler)}
		if mtls {
			cfg.ClusterID, cfg.TLS = benchClusterID, tl[i]
		}
		n, err := node.Start(cfg)
		if err != nil {
			for _, l := range lns[i:] {
				l.Close()
			}
			c.stop()
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}
	// Ready when every node has a session: a first lock succeeds on each.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, n := range c.nodes {
		h, err := n.Acquire(ctx, fmt.Sprintf("warmup/%d", i), "warmup", true, 0)
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("lockraft node %d not ready: %w", i+1, err)
		}
		if err := h.Release(ctx); err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

// stop closes every node at once: closed one after another, the last would
// wait for a quorum that has already left (seconds of a bench run spent on
// teardown).
func (c *lockraftCluster) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(func() { n.Close(ctx) })
	}
	wg.Wait()
}

// startWithLeader starts a cluster (startLockraft) and returns it with the index of its leader.
func startWithLeader(dir string, ttl time.Duration, mtls bool) (*lockraftCluster, int, error) {
	c, err := startLockraft(dir, ttl, mtls)
	if err != nil {
		return nil, 0, err
	}
	ld := c.leader()
	if ld < 0 {
		c.stop()
		return nil, 0, fmt.Errorf("no leader")
	}
	return c, ld, nil
}

func (c *lockraftCluster) leader() int {
	for i, n := range c.nodes {
		if n.Leader() == n.ID() {
			return i
		}
	}
	return -1
}

// caller i lives on node i%3, as callers of an embedding service live on
// every replica. LOCKRAFT_BENCH_CALLERS=leader puts every caller on the
// leader instead (a diagnostic: it shows what forwarding costs).
func (c *lockraftCluster) caller(i int) (caller, error) {
	n := c.nodes[i%len(c.nodes)]
	if os.Getenv("LOCKRAFT_BENCH_CALLERS") == "leader" {
		if ld := c.leader(); ld >= 0 {
			n = c.nodes[ld]
		}
	}
	return &lockraftCaller{n: n, owner: fmt.Sprintf("caller-%d", i)}, nil
}

type lockraftCaller struct {
	n     *node.Node
	owner string
}

func (c *lockraftCaller) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	h, err := c.n.Acquire(ctx, name, c.owner, true, 0)
	if err != nil {
		return nil, err
	}
	return h.Release, nil
}

func (c *lockraftCaller) close() {}

// lockraftCrashTakeover: the holder's node (a follower) crashes while a
// waiter on the other follower waits; its session, and so the lock, lasts
// until the session TTL runs out on the leader.
func lockraftCrashTakeover(dir string, ttl time.Duration, mtls bool) (time.Duration, error) {
	c, ld, err := startWithLeader(dir, ttl, mtls)
	if err != nil {
		return 0, err
	}
	defer c.stop()
	h, w := (ld+1)%3, (ld+2)%3
	ctx, cancel := context.WithTimeout(context.Background(), ttl+30*time.Second)
	defer cancel()
	if _, err := c.nodes[h].Acquire(ctx, "s4/crash", "holder", true, 0); err != nil {
		return 0, err
	}
	got := waitGrant(ctx, &lockraftCaller{n: c.nodes[w], owner: "waiter"}, "s4/crash")
	time.Sleep(300 * time.Millisecond) // the waiter is queued
	t0 := time.Now()
	c.nodes[h].Crash()
	return (<-got).since(t0)
}

// lockraftFailover: crash the leader; a caller on a follower keeps asking
// for a lock; the time from the crash until one is granted.
func lockraftFailover(dir string, graceful bool, mtls bool) (time.Duration, error) {
	c, ld, err := startWithLeader(dir, 10*time.Second, mtls)
	if err != nil {
		return 0, err
	}
	defer c.stop()
	f := c.nodes[(ld+1)%3]
	t0 := time.Now()
	if graceful {
		// Close hands leadership to a caught-up voter, closes the session
		// and stops; the Lock below runs while it does.
		closed := make(chan struct{})
		go func() { c.nodes[ld].Close(context.Background()); close(closed) }()
		defer func() { <-closed }()
	} else {
		c.nodes[ld].Crash()
	}
	for i := 0; time.Since(t0) < 30*time.Second; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), failoverAttempt)
		h, err := f.Acquire(ctx, fmt.Sprintf("s5/%d", i), "s5", true, 0)
		cancel()
		if err == nil {
			d := time.Since(t0)
			h.Release(context.Background())
			return d, nil
		}
	}
	return 0, errTimeout
}

// tickFor is the default 100 ms tick, or a shorter one when ttl is below
// lockraft's floor for it (node.MinSessionTTL: two back-to-back failovers);
// the comparison runs use TTL 3 s, which needs elections after 0.5–1 s.
func tickFor(ttl time.Duration) time.Duration {
	tick := node.DefaultTickInterval
	for tick > time.Millisecond && node.MinSessionTTL(10*tick) > ttl {
		tick /= 2
	}
	return tick
}
