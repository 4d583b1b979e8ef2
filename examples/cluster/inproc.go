package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockraft/lockraft"
	"github.com/lockraft/lockraft/internal/cluster"
)

// runInProcess runs three nodes in this process, each with its own
// listener and data directory under tmp (certificates in certs with -tls).
func runInProcess(tmp, certs string) error {
	// The module's cluster harness binds a listener per node and starts
	// each one with lockraft.Join, as a service would.
	c, err := cluster.Start(cluster.Options[*lockraft.Node]{Size: flagNodes, Dir: tmp,
		Start: func(s cluster.Spec) (*lockraft.Node, error) {
			var peers []string
			for _, p := range s.Peers {
				peers = append(peers, p.Addr)
			}
			opts := append(nodeOptions(s.ID, s.Dir, certs), lockraft.WithListener(s.Listener), lockraft.WithListenAddr(s.Addr))
			n, err := lockraft.Join(peers, opts...)
			if err != nil {
				return nil, fmt.Errorf("join node %d: %w", s.ID, err)
			}
			return n, nil
		}})
	if err != nil {
		return err
	}
	nodes := make([]*lockraft.Node, flagNodes)
	var peers []string
	for i, id := range c.IDs() {
		nodes[i], _ = c.Node(id)
		peers = append(peers, c.Addr(id))
	}
	defer func() { // in parallel: the last ones alone would have no quorum for a graceful Close
		var wg sync.WaitGroup
		for _, n := range nodes {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				n.Close(ctx)
			})
		}
		wg.Wait()
	}()
	fmt.Printf("3 nodes on %v, data in %s\n", peers, tmp)

	start := time.Now()
	for nodes[0].LeaderID() == 0 {
		if time.Since(start) > 15*time.Second {
			return errors.New("no leader elected within 15s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("leader: node %d (elected in %v)\n", nodes[0].LeaderID(), time.Since(start).Round(time.Millisecond))
	if stopAdmin, err := startAdmin(nodes); err == nil { // admin.go
		defer stopAdmin()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	line, err := demoReentrancy(ctx, nodes[0], nodes[1])
	if err != nil {
		return fmt.Errorf("reentrancy: %w", err)
	}
	fmt.Println(line)

	skus := skuNames()
	store, err := openDemoStore(tmp, skus)
	if err != nil {
		return err
	}
	defer store.Close()
	counts := make([]*Counts, flagNodes)
	fmt.Printf("selling %d SKUs × %d units with %d workers on each of %d nodes\n", len(skus), *flagStock, *flagWorkers, flagNodes)

	var wg sync.WaitGroup
	repCtx, stopReporters := context.WithCancel(ctx)
	progCtx, stopProgress := context.WithCancel(ctx)
	var tryOK, tryBusy func() int64
	tryOK = func() (s int64) {
		for _, c := range counts {
			s += atomic.LoadInt64(&c.TryOK)
		}
		return
	}
	tryBusy = func() (s int64) {
		for _, c := range counts {
			s += atomic.LoadInt64(&c.TryLocked)
		}
		return
	}
	go progressLoop(progCtx, os.Stdout, store.Snapshot, time.Second,
		func() string { return fmt.Sprintf("report TryLock ok/ErrLocked %d/%d", tryOK(), tryBusy()) })

	var repWG sync.WaitGroup
	begin := time.Now()
	for i, n := range nodes {
		counts[i] = &Counts{Node: uint64(n.ID())}
		for w := range *flagWorkers {
			wg.Add(1)
			go func() { defer wg.Done(); worker(ctx, n, store, skus, i*(*flagWorkers)+w, counts[i]) }()
		}
		repWG.Add(1)
		go func() { defer repWG.Done(); reporter(repCtx, n, counts[i]) }()
	}
	zombie := make(chan string, 1)
	go func() {
		line, err := demoZombie(ctx, nodes[2], store, skus[0])
		if err != nil {
			line = "FAIL: " + err.Error()
		}
		zombie <- line
	}()
	wg.Wait()
	elapsed := time.Since(begin)
	stopReporters()
	repWG.Wait()
	stopProgress()
	fmt.Println(<-zombie)

	snap, err := store.Final()
	if err != nil {
		return fmt.Errorf("reading the books: %w", err)
	}
	bad := result(os.Stdout, snap, elapsed)
	var lockErrs, unlockErrs, lost int64
	for _, c := range counts {
		lockErrs += c.LockErrs
		unlockErrs += c.UnlockErrs
		lost += c.Lost
		fmt.Printf("node %d: sold %d, report TryLock ok %d / ErrLocked %d\n", c.Node, c.Sold, c.TryOK, c.TryLocked)
	}
	fmt.Printf("Lock errors (retried) %d, Unlock errors %d, writes skipped because the lock was lost %d\n", lockErrs, unlockErrs, lost)
	if tryBusy() == 0 {
		bad = append(bad, "TryLock never saw ErrLocked")
	}

	// Close: node 3 holds a lock; node 1 waits for it; node 3 closes.
	if line, err := demoClose(ctx, nodes[2], nodes[0]); err != nil {
		bad = append(bad, "close: "+err.Error())
	} else {
		fmt.Println(line)
	}
	return verdict(bad)
}

// demoClose: holder holds "nightly-export", waiter blocks on it, holder's
// node closes; its handle's Context ends and the waiter is granted.
func demoClose(ctx context.Context, holder, waiter *lockraft.Node) (string, error) {
	l, err := holder.Lock(ctx, "nightly-export")
	if err != nil {
		return "", err
	}
	got := make(chan *lockraft.Lock, 1)
	errc := make(chan error, 1)
	go func() {
		wl, err := waiter.Lock(ctx, "nightly-export")
		if err != nil {
			errc <- err
			return
		}
		got <- wl
	}()
	time.Sleep(200 * time.Millisecond) // let the waiter queue
	select {
	case <-got:
		return "", errors.New("waiter granted while the lock was held")
	default:
	}
	t0 := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := holder.Close(cctx); err != nil {
		return "", fmt.Errorf("Close: %w", err)
	}
	select {
	case wl := <-got:
		d := time.Since(t0)
		<-l.Context().Done()
		defer wl.Unlock(ctx)
		return fmt.Sprintf("close: node %d closed holding nightly-export (token %d; its Context ended: %v); "+
			"node %d's waiting Lock was granted %v after Close began (token %d)",
			holder.ID(), l.Token(), context.Cause(l.Context()), waiter.ID(), d.Round(time.Millisecond), wl.Token()), nil
	case err := <-errc:
		return "", fmt.Errorf("waiter: %w", err)
	case <-time.After(10 * time.Second):
		return "", errors.New("waiter not granted within 10s of Close")
	}
}
