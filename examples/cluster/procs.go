package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lockraft/lockraft"
)

// child is one node process as the parent sees it.
type child struct {
	id     uint64
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	counts chan *Counts // receives the child's JSON report (nil on EOF without one)
	exited chan error
}

// runProcs is the parent: it creates the store's tables and starts each
// node as its own process (this binary, re-executed), which opens the same
// database.
func runProcs(tmp, certs string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}

	// Free ports: bind :0, note the address, release it for the child.
	var peers []string
	for range flagNodes {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		peers = append(peers, ln.Addr().String())
		ln.Close()
	}
	skus := skuNames()
	store, err := openDemoStore(tmp, skus)
	if err != nil {
		return err
	}
	defer store.Close()
	storeURL := store.url
	fmt.Printf("3 node processes on %v, data in %s; each opens the store itself\n", peers, tmp)
	fmt.Printf("selling %d SKUs × %d units with %d workers in each node process\n", len(skus), *flagStock, *flagWorkers)

	start := func(id uint64, restarted bool) (*child, error) {
		args := []string{"-node-id", fmt.Sprint(id), "-peers", strings.Join(peers, ","),
			"-data", filepath.Join(tmp, fmt.Sprintf("n%d", id)), "-store", storeURL,
			"-skus", fmt.Sprint(*flagSKUs), "-stock", fmt.Sprint(*flagStock), "-workers", fmt.Sprint(*flagWorkers)}
		if restarted {
			args = append(args, "-restarted")
		}
		if certs != "" {
			args = append(args, "-certs", certs)
		}
		c := &child{id: id, cmd: exec.Command(exe, args...), counts: make(chan *Counts, 1), exited: make(chan error, 1)}
		stdout, _ := c.cmd.StdoutPipe()
		stderr, _ := c.cmd.StderrPipe()
		c.stdin, _ = c.cmd.StdinPipe()
		if err := c.cmd.Start(); err != nil {
			return nil, err
		}
		go relay(id, stderr)
		go func() {
			var got *Counts
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				var cn Counts
				if json.Unmarshal(sc.Bytes(), &cn) == nil && got == nil {
					got = &cn
					c.counts <- got
				}
			}
			if got == nil {
				c.counts <- nil
			}
			c.exited <- c.cmd.Wait()
		}()
		return c, nil
	}

	children := make([]*child, flagNodes)
	for i := range children {
		if children[i], err = start(uint64(i+1), false); err != nil {
			return err
		}
	}
	defer func() {
		for _, c := range children {
			c.cmd.Process.Kill()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	progCtx, stopProgress := context.WithCancel(ctx)
	defer stopProgress()
	go progressLoop(progCtx, os.Stdout, store.Snapshot, time.Second, nil)
	begin := time.Now()

	var mu sync.Mutex // guards children and restarted during a kill/restart
	restarted := map[uint64]bool{}
	killed := make(chan error, 1)
	if *flagKill {
		go func() { killed <- killOne(ctx, store, &mu, children, restarted, start) }()
	} else {
		killed <- nil
	}

	// Every child reports when its workers are done; the killed one is
	// waited for again after its restart.
	reports := map[uint64]*Counts{}
	for len(reports) < flagNodes {
		mu.Lock()
		pending := []*child{}
		for _, c := range children {
			if reports[c.id] == nil {
				pending = append(pending, c)
			}
		}
		mu.Unlock()
		c := pending[0]
		select {
		case cn := <-c.counts:
			if cn != nil {
				reports[c.id] = cn
				continue
			}
			// No report: killed by us (a restart is coming), or a crash.
			if err := <-c.exited; err != nil && !*flagKill {
				return fmt.Errorf("node %d process exited without a report: %v", c.id, err)
			}
			time.Sleep(100 * time.Millisecond)
			mu.Lock()
			same := children[c.id-1] == c
			mu.Unlock()
			if same && !*flagKill {
				return fmt.Errorf("node %d process exited without a report", c.id)
			}
			if same {
				// killed and not restarted yet: wait for killOne
				for {
					time.Sleep(100 * time.Millisecond)
					mu.Lock()
					same = children[c.id-1] == c
					mu.Unlock()
					if !same {
						break
					}
				}
			}
		case <-ctx.Done():
			return errors.New("timed out waiting for the node processes")
		}
	}
	elapsed := time.Since(begin)
	stopProgress()
	if err := <-killed; err != nil {
		return fmt.Errorf("kill/restart: %w", err)
	}
	// All done: close stdin so every child Closes its node (together, so
	// the graceful Close has a quorum) and exits.
	for _, c := range children {
		c.stdin.Close()
	}
	for _, c := range children {
		select {
		case err := <-c.exited:
			if err != nil {
				fmt.Printf("node %d process: %v\n", c.id, err)
			}
		case <-time.After(10 * time.Second):
			fmt.Printf("node %d process did not exit in 10s; killing it\n", c.id)
		}
	}

	snap, err := store.Final()
	if err != nil {
		return fmt.Errorf("reading the books: %w", err)
	}
	bad := result(os.Stdout, snap, elapsed)
	for _, line := range snap.Recovered {
		fmt.Println("crash release:", line)
	}
	for id := uint64(1); id <= uint64(flagNodes); id++ {
		c := reports[id]
		life := ""
		if restarted[id] {
			life = " (counts since its restart)"
		}
		fmt.Printf("node %d%s: sold %d, report TryLock ok %d / ErrLocked %d, Lock errors (retried) %d\n",
			id, life, c.Sold, c.TryOK, c.TryLocked, c.LockErrs)
	}
	return verdict(bad)
}

// killOne waits until a third of the stock is sold, kill -9s the leader's
// process, tells the store that process is inside nothing any more, and
// restarts it from its data directory a second later.
func killOne(ctx context.Context, store *Store, mu *sync.Mutex, children []*child, restarted map[uint64]bool, start func(uint64, bool) (*child, error)) error {
	total := *flagSKUs * *flagStock
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if snap, err := store.Snapshot(); err == nil {
			if _, _, sold := snap.Totals(); sold >= total/3 {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	snap, err := store.Snapshot()
	if err != nil {
		return err
	}
	victim := snap.Leader
	if victim == 0 {
		victim = 2
	}
	mu.Lock()
	c := children[victim-1]
	mu.Unlock()
	_, _, sold := snap.Totals()
	c.cmd.Process.Kill() // SIGKILL: no cleanup, no session close
	for c.cmd.ProcessState == nil && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond) // the reader goroutine reaps it
	}
	inside, err := store.Abandon(victim)
	if err != nil {
		return err
	}
	where := "outside every critical section"
	if len(inside) > 0 {
		where = "inside the critical section of " + strings.Join(inside, ", ")
	}
	fmt.Printf("*** kill -9 node %d (the leader) at %d sold, %s\n", victim, sold, where)
	time.Sleep(time.Second)
	nc, err := start(victim, true)
	if err != nil {
		return err
	}
	mu.Lock()
	children[victim-1] = nc
	restarted[victim] = true
	mu.Unlock()
	fmt.Printf("*** restarted node %d from its data directory\n", victim)
	return nil
}

// relay copies a child's stderr: lines starting with "> " are the demo's
// own output (to stdout), the rest are library logs (to stderr).
func relay(id uint64, r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "> "); ok {
			fmt.Printf("  [node %d] %s\n", id, line)
		} else {
			fmt.Fprintf(os.Stderr, "  [node %d] %s\n", id, sc.Text())
		}
	}
}

// runChild is one node process: it embeds its node, runs its workers
// against the parent's store, prints its counts as JSON on stdout, then
// waits for stdin to close before closing the node. storeURL is the
// database (-db, or the parent's SQLite file).
func runChild(id uint64, peers []string, dir, storeURL string) error {
	say := func(format string, a ...any) { fmt.Fprintf(os.Stderr, "> "+format+"\n", a...) }
	opts := append(nodeOptions(id, dir, *flagCerts), lockraft.WithListenAddr(peers[id-1]))
	n, err := lockraft.Join(peers, opts...)
	if err != nil {
		return err
	}
	res, err := OpenStore(storeURL)
	if err != nil {
		return err
	}
	defer res.Close()
	skus := skuNames()
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Second)
	defer cancel()
	t0 := time.Now()
	for n.LeaderID() == 0 && time.Since(t0) < 15*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	say("pid %d serving on %s, sees leader node %d after %v", os.Getpid(), n.Addr(), n.LeaderID(), time.Since(t0).Round(time.Millisecond))

	zombie := make(chan string, 1)
	if id == 1 && !*flagRestarted {
		line, err := demoReentrancy(ctx, n, n)
		if err != nil {
			return fmt.Errorf("reentrancy: %w", err)
		}
		say("%s", line)
		go func() {
			line, err := demoZombie(ctx, n, res, skus[0])
			if err != nil {
				line = "FAIL: " + err.Error()
			}
			zombie <- line
		}()
	} else {
		close(zombie)
	}

	c := &Counts{Node: id}
	var wg sync.WaitGroup
	for w := range *flagWorkers {
		wg.Go(func() { worker(ctx, n, res, skus, int(id-1)*(*flagWorkers)+w, c) })
	}
	repCtx, stopRep := context.WithCancel(ctx)
	var rwg sync.WaitGroup
	rwg.Go(func() { reporter(repCtx, n, c) })
	wg.Wait()
	stopRep()
	rwg.Wait()
	if line, ok := <-zombie; ok {
		say("%s", line)
	}
	b, _ := json.Marshal(c)
	fmt.Println(string(b))
	io.Copy(io.Discard, os.Stdin) // until the parent says everyone is done
	cctx, ccancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer ccancel()
	return n.Close(cctx)
}
