package lockraft_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/lockraft/lockraft"
	"github.com/lockraft/lockraft/node"
)

// exampleNode starts a one-member cluster in a temporary directory; in a
// service, every replica calls lockraft.Join with the others as peers.
func exampleNode() (*lockraft.Node, func()) {
	dir, err := os.MkdirTemp("", "lockraft-example-")
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	n, err := lockraft.Join(nil, lockraft.WithDataDir(dir), lockraft.WithListener(ln),
		lockraft.WithStaticMembers(1, map[uint64]string{1: ln.Addr().String()}),
		lockraft.WithNodeConfig(func(c *node.Config) {
			c.TickInterval = 20 * time.Millisecond
			c.SessionTTL = 2 * time.Second
			c.KeepaliveInterval = 100 * time.Millisecond
		}))
	if err != nil {
		panic(err)
	}
	return n, func() { n.Close(context.Background()); os.RemoveAll(dir) }
}

// A read-write lock: readers share it, a writer has it alone, and a writer
// is fenced above every reader before it.
func ExampleNode_RLock() {
	n, stop := exampleNode()
	defer stop()
	ctx := context.Background()

	r1, _ := n.RLock(ctx, "catalog")
	r2, _ := n.RLock(ctx, "catalog") // readers share the lock
	_, err := n.TryWLock(ctx, "catalog")
	fmt.Println("writer while readers hold:", err != nil)
	r1.Unlock(ctx)
	r2.Unlock(ctx)

	w, _ := n.WLock(ctx, "catalog")
	fmt.Println("writer token above the readers':", w.Token() > r2.Token())
	w.Unlock(ctx)
	// Output:
	// writer while readers hold: true
	// writer token above the readers': true
}

// A semaphore of 3 permits: acquisitions of 2 and 1 fill it; a third waits
// (or a try fails) until permits come back.
func ExampleSemaphore_Acquire() {
	n, stop := exampleNode()
	defer stop()
	ctx := context.Background()
	pool := n.Semaphore("db-connections", 3)

	a, _ := pool.Acquire(ctx, 2)
	b, _ := pool.Acquire(ctx, 1)
	_, err := pool.TryAcquire(ctx, 1)
	fmt.Println("full:", err != nil)
	a.Release(ctx)
	c, _ := pool.TryAcquire(ctx, 2)
	fmt.Println("acquired", c.Permits(), "after a release")
	b.Release(ctx)
	c.Release(ctx)
	// Output:
	// full: true
	// acquired 2 after a release
}

// Leader election: Campaign blocks until this caller leads; the leadership's
// Context ends before anyone else could lead; Proclaim announces a new value.
func ExampleNode_Campaign() {
	n, stop := exampleNode()
	defer stop()
	ctx := context.Background()

	l, _ := n.Campaign(ctx, "scheduler", "10.0.0.7:8080")
	fmt.Println("leading, term > 0:", l.Token() > 0)
	l.Proclaim(ctx, "10.0.0.7:9090")
	// Run the leader's work until l.Context() ends; then:
	l.Resign(ctx)
	fmt.Println("resigned:", l.Context().Err() != nil)
	// Output:
	// leading, term > 0: true
	// resigned: true
}

// Observe yields the current leader first, then every change in log order.
func ExampleNode_Observe() {
	n, stop := exampleNode()
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	changes := n.Observe(ctx, "scheduler")
	go func() {
		l, _ := n.Campaign(context.Background(), "scheduler", "10.0.0.7:8080")
		l.Proclaim(context.Background(), "10.0.0.7:9090")
		l.Resign(context.Background())
	}()
	seen := 0
	for l, err := range changes {
		if err != nil {
			break
		}
		if l.Leading() {
			fmt.Println("leader:", l.Value)
		} else {
			fmt.Println("nobody leads")
		}
		if seen++; seen == 4 {
			cancel()
		}
	}
	// Output:
	// nobody leads
	// leader: 10.0.0.7:8080
	// leader: 10.0.0.7:9090
	// nobody leads
}

// LockAll takes several names in one log entry, all or none: callers that
// name them in any order never deadlock.
func ExampleNode_LockAll() {
	n, stop := exampleNode()
	defer stop()
	ctx := context.Background()

	l, _ := n.LockAll(ctx, []string{"account/17", "account/42"})
	fmt.Println("holding", l.Names())
	_, err := n.TryLock(ctx, "account/42")
	fmt.Println("one of them, alone:", err != nil)
	l.Unlock(ctx) // releases both
	// Output:
	// holding [account/17 account/42]
	// one of them, alone: true
}

// Locker adapts a mutex to sync.Locker, for code that takes one; see Locker
// for what it cannot do (no context, no token, no loss notice).
func ExampleNode_Locker() {
	n, stop := exampleNode()
	defer stop()
	mu := n.Locker("report/daily")
	mu.Lock()
	fmt.Println("in the critical section")
	mu.Unlock()
	// Output: in the critical section
}
