package lockraft_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"time"

	"github.com/lockraft/lockraft"
)

// Three replicas with static peers: every replica gets the same list of
// every member's address, in the same order, and finds itself in it by its
// listening address. In a service each replica is its own process on its
// own host and calls Join once; here all three run in one process on
// loopback, each with its own data directory.
func Example_join() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Bind the three listeners first, so that the peer list is known.
	var peers []string
	var listeners []net.Listener
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		listeners = append(listeners, ln)
		peers = append(peers, ln.Addr().String())
	}

	var nodes []*lockraft.Node
	for i, ln := range listeners {
		dir, err := os.MkdirTemp("", "lockraft-example-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		node, err := lockraft.Join(peers,
			lockraft.WithDataDir(dir),
			lockraft.WithListener(ln),
			lockraft.WithListenAddr(peers[i]),             // this replica's entry in peers
			lockraft.WithTimings(10*time.Millisecond, 10), // a 100 ms election timeout: fine on loopback
		)
		if err != nil {
			log.Fatal(err)
		}
		defer node.Close(context.Background())
		nodes = append(nodes, node)
	}
	for _, node := range nodes {
		if err := node.Ready(ctx); err != nil { // a leader is known and the session is open
			log.Fatal(err)
		}
	}

	l, err := nodes[0].Lock(ctx, "stock/sku-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("replica 1 holds the lock")

	_, err = nodes[1].TryLock(ctx, "stock/sku-42")
	fmt.Println("replica 2 finds it locked:", errors.Is(err, lockraft.ErrLocked))

	if err := l.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	l3, err := nodes[2].Lock(ctx, "stock/sku-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("replica 3's token is higher:", l3.Token() > l.Token())
	if err := l3.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// replica 1 holds the lock
	// replica 2 finds it locked: true
	// replica 3's token is higher: true
}

// Three replicas that find each other by gossip: each is given its own
// stable name, the same list of founders, and the gossip address of any
// member already started as a seed (on Kubernetes: a StatefulSet's pod name
// and its headless Service). The founders form the cluster once they all
// see each other; members not among them only ever join.
func ExampleJoin_gossip() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	founders := []string{"orders-0", "orders-1", "orders-2"}
	var nodes []*lockraft.Node
	var seeds []string
	for _, name := range founders {
		dir, err := os.MkdirTemp("", "lockraft-example-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		node, err := lockraft.Join(seeds,
			lockraft.WithDataDir(dir),
			lockraft.WithGossip(lockraft.Gossip{
				Name:     name,
				Founders: founders,
				Timing:   lockraft.FastGossipTiming(), // loopback only; the default is LANGossipTiming
			}),
			lockraft.WithTimings(10*time.Millisecond, 10),
		)
		if err != nil {
			log.Fatal(err)
		}
		defer node.Close(context.Background())
		nodes = append(nodes, node)
		seeds = []string{node.GossipAddr()}
	}

	var last uint64
	for i, node := range nodes {
		l, err := node.Lock(ctx, "report/daily") // waits until the cluster has formed
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s granted, token increased: %v\n", founders[i], l.Token() > last)
		last = l.Token()
		if err := l.Unlock(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// orders-0 granted, token increased: true
	// orders-1 granted, token increased: true
	// orders-2 granted, token increased: true
}

// exampleNode starts a cluster of one, on loopback, in a temporary
// directory, as ExampleNode_Lock does step by step; stop closes the node and
// removes the directory.
func exampleNode() (node *lockraft.Node, stop func()) {
	dir, err := os.MkdirTemp("", "lockraft-example-")
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	addr := ln.Addr().String()
	node, err = lockraft.Join([]string{addr}, lockraft.WithDataDir(dir), lockraft.WithListener(ln),
		lockraft.WithListenAddr(addr), lockraft.WithTimings(10*time.Millisecond, 10))
	if err != nil {
		log.Fatal(err)
	}
	return node, func() {
		node.Close(context.Background())
		os.RemoveAll(dir)
	}
}

// Lock blocks until the lock is granted. The handle's Context ends when the
// lock is lost or released (pass it to the work done under the lock), and
// its Token fences that work at the resource.
func ExampleNode_Lock() {
	// A cluster of one, on loopback, in a temporary directory.
	dir, err := os.MkdirTemp("", "lockraft-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	addr := ln.Addr().String()
	node, err := lockraft.Join([]string{addr}, lockraft.WithDataDir(dir), lockraft.WithListener(ln),
		lockraft.WithListenAddr(addr), lockraft.WithTimings(10*time.Millisecond, 10))
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := node.Lock(ctx, "migration/2024-07")
	if err != nil {
		log.Fatal(err) // nothing is held or queued
	}
	fmt.Println("granted, token above zero:", l.Token() > 0)
	fmt.Println("held:", l.Context().Err() == nil)

	if err := l.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released:", errors.Is(context.Cause(l.Context()), lockraft.ErrReleased))
	// Output:
	// granted, token above zero: true
	// held: true
	// released: true
}

// TryLock never queues: it returns ErrLocked at once when another owner
// holds the name. ErrLocked is worth retrying later (IsRetryable).
func ExampleNode_TryLock() {
	node, stop := exampleNode()
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := node.Ready(ctx); err != nil { // right after Join, wait for a leader first
		log.Fatal(err)
	}
	l, err := node.TryLock(ctx, "cron/cleanup")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first TryLock granted")

	_, err = node.TryLock(ctx, "cron/cleanup") // each call is its own owner
	fmt.Println("second TryLock locked:", errors.Is(err, lockraft.ErrLocked))
	fmt.Println("retryable:", lockraft.IsRetryable(err))

	if err := l.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	l, err = node.TryLock(ctx, "cron/cleanup")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("granted after Unlock")
	l.Unlock(ctx)
	// Output:
	// first TryLock granted
	// second TryLock locked: true
	// retryable: true
	// granted after Unlock
}

// Reentrancy is explicit: calls with the same owner re-enter the lock (same
// token, one more hold) and each needs its own Unlock. Without WithOwner
// every call is an owner of its own.
func ExampleWithOwner() {
	node, stop := exampleNode()
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	outer, err := node.Lock(ctx, "invoice/42", lockraft.WithOwner("job-7"))
	if err != nil {
		log.Fatal(err)
	}
	inner, err := node.Lock(ctx, "invoice/42", lockraft.WithOwner("job-7"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("re-entered, same token:", inner.Token() == outer.Token())

	inner.Unlock(ctx)
	_, err = node.TryLock(ctx, "invoice/42")
	fmt.Println("still held after one Unlock:", errors.Is(err, lockraft.ErrLocked))
	outer.Unlock(ctx)
	l, err := node.TryLock(ctx, "invoice/42")
	fmt.Println("free after the second:", err == nil)
	l.Unlock(ctx)
	// Output:
	// re-entered, same token: true
	// still held after one Unlock: true
	// free after the second: true
}

// A lock with its own lease is released when the lease runs out unless it
// is renewed. The holder's Context ends first, before the cluster can grant
// the lock to anyone else.
func ExampleWithLease() {
	node, stop := exampleNode()
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := node.Lock(ctx, "batch/nightly", lockraft.WithLease(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	if err := l.Renew(ctx); err != nil { // restarts the lease; not logged, a call to the leader
		log.Fatal(err)
	}
	fmt.Println("renewed")

	<-l.Context().Done() // no more renewals: the lease runs out
	fmt.Println("lost:", errors.Is(context.Cause(l.Context()), lockraft.ErrLeaseExpired))

	next, err := node.Lock(ctx, "batch/nightly")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("next owner granted, token higher:", next.Token() > l.Token())
	next.Unlock(ctx)
	// Output:
	// renewed
	// lost: true
	// next owner granted, token higher: true
}
