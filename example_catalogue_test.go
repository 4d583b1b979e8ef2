package lockraft_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/lockraft/lockraft"
)

// A read-write lock: readers share it, a writer has it alone, and a
// writer's token is above every reader's before it, so a resource can fence
// writers against stale readers too.
func ExampleNode_RLock() {
	node, stop := exampleNode()
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r1, err := node.RLock(ctx, "catalog")
	if err != nil {
		log.Fatal(err)
	}
	r2, err := node.RLock(ctx, "catalog") // readers share the lock
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("two readers granted:", r1.Shared() && r2.Shared())
	_, err = node.TryWLock(ctx, "catalog")
	fmt.Println("writer while readers hold:", errors.Is(err, lockraft.ErrLocked))
	r1.Unlock(ctx)
	r2.Unlock(ctx)

	w, err := node.WLock(ctx, "catalog")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("writer token above the readers':", w.Token() > r2.Token())
	w.Unlock(ctx)
	// Output:
	// two readers granted: true
	// writer while readers hold: true
	// writer token above the readers': true
}

// A semaphore of 3 permits: acquisitions of 2 and 1 fill it; a third waits
// (or a try fails) until permits come back.
func ExampleSemaphore_Acquire() {
	node, stop := exampleNode()
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool := node.Semaphore("db-connections", 3) // the same size on every replica
	a, err := pool.Acquire(ctx, 2)
	if err != nil {
		log.Fatal(err)
	}
	b, err := pool.Acquire(ctx, 1)
	if err != nil {
		log.Fatal(err)
	}
	_, err = pool.TryAcquire(ctx, 1)
	fmt.Println("full:", errors.Is(err, lockraft.ErrLocked))

	a.Release(ctx)
	c, err := pool.TryAcquire(ctx, 2)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("acquired", c.Permits(), "after a release")
	b.Release(ctx)
	c.Release(ctx)
	// Output:
	// full: true
	// acquired 2 after a release
}

// Leader election: Campaign blocks until this caller leads, in FIFO order
// among the campaigners. The leadership's Context ends before anyone else
// can lead, and its Token is the term, higher for every new leader.
func ExampleNode_Campaign() {
	node, stop := exampleNode()
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := node.Campaign(ctx, "scheduler", "10.0.0.7:8080")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leading:", first.Context().Err() == nil)

	// A second campaigner waits until the first resigns.
	second := make(chan *lockraft.Leadership)
	go func() {
		l, err := node.Campaign(ctx, "scheduler", "10.0.0.8:8080")
		if err != nil {
			log.Fatal(err)
		}
		second <- l
	}()
	// Run the leader's work with first.Context() until it ends; then:
	if err := first.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	next := <-second
	fmt.Println("first resigned:", errors.Is(context.Cause(first.Context()), lockraft.ErrReleased))
	fmt.Println("next term is higher:", next.Token() > first.Token())
	next.Resign(ctx)
	// Output:
	// leading: true
	// first resigned: true
	// next term is higher: true
}

// Observe yields the election's current leader first, then every change of
// leader or value, in log order.
func ExampleNode_Observe() {
	node, stop := exampleNode()
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := node.Campaign(ctx, "scheduler", "10.0.0.7:8080")
	if err != nil {
		log.Fatal(err)
	}
	for leader, err := range node.Observe(ctx, "scheduler") {
		if err != nil {
			log.Fatal(err)
		}
		if !leader.Leading() {
			fmt.Println("nobody leads")
			break
		}
		fmt.Println("leader:", leader.Value)
		// Act as the leader would, to see the changes come in.
		if leader.Value == "10.0.0.7:8080" {
			l.Proclaim(ctx, "10.0.0.7:9090") // a new value, same leader
		} else {
			l.Resign(ctx)
		}
	}
	// Output:
	// leader: 10.0.0.7:8080
	// leader: 10.0.0.7:9090
	// nobody leads
}

// LockAll takes several names in one log entry, all or none: callers that
// name them in any order never deadlock.
func ExampleNode_LockAll() {
	node, stop := exampleNode()
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := node.LockAll(ctx, []string{"account/17", "account/42"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding", l.Names())
	_, err = node.TryLock(ctx, "account/42")
	fmt.Println("one of them, alone:", errors.Is(err, lockraft.ErrLocked))
	l.Unlock(ctx) // releases both
	// Output:
	// holding [account/17 account/42]
	// one of them, alone: true
}

// Locker adapts a mutex to sync.Locker, for code that takes one; see Locker
// for what it cannot do (no context, no token, no loss notice).
func ExampleNode_Locker() {
	node, stop := exampleNode()
	defer stop()

	mu := node.Locker("report/daily")
	mu.Lock()
	fmt.Println("in the critical section")
	mu.Unlock()
	// Output: in the critical section
}
