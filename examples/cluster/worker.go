package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/lockraft/lockraft"
)

// Counts is what the workers of one node did. In -procs mode a child prints
// it as JSON on stdout when it is done.
type Counts struct {
	Node       uint64 `json:"node"`
	Sold       int64  `json:"sold"`        // writes the store accepted
	SoldOutHit int64  `json:"sold_out"`    // critical sections that found stock 0
	Rejected   int64  `json:"rejected"`    // store refused our token
	LockErrs   int64  `json:"lock_errors"` // Lock failed (retried)
	UnlockErrs int64  `json:"unlock_errors"`
	Lost       int64  `json:"lost"`     // lock Context ended before the write: write skipped
	TryOK      int64  `json:"try_ok"`   // TryLock("report") granted
	TryLocked  int64  `json:"try_busy"` // TryLock("report") got ErrLocked
	LastError  string `json:"last_error,omitempty"`
}

func (c *Counts) fail(err error) {
	atomic.AddInt64(&c.LockErrs, 1)
	c.LastError = err.Error() // racy by design of a demo counter; last one wins
}

// worker sells units until every SKU is sold out: Lock, read, work, write
// with the token, Unlock.
func worker(ctx context.Context, n *lockraft.Node, res Resource, skus []string, w int, c *Counts) {
	soldOut := map[string]bool{}
	for i := w; len(soldOut) < len(skus) && ctx.Err() == nil; i++ {
		sku := skus[i%len(skus)]
		if soldOut[sku] {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := n.Lock(lctx, "stock/"+sku)
		cancel()
		if err != nil {
			if errors.Is(err, lockraft.ErrClosed) || ctx.Err() != nil {
				return
			}
			c.fail(err) // timed out or unavailable: nothing left behind, try again
			time.Sleep(50 * time.Millisecond)
			continue
		}
		sellOne(n, l, res, sku, c, soldOut)
		uctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := l.Unlock(uctx); err != nil {
			atomic.AddInt64(&c.UnlockErrs, 1)
		}
		cancel()
	}
}

func sellOne(n *lockraft.Node, l *lockraft.Lock, res Resource, sku string, c *Counts, soldOut map[string]bool) {
	tok := l.Token()
	stock, err := res.Enter(sku, tok, uint64(n.ID()), uint64(n.LeaderID()))
	if err != nil {
		atomic.AddInt64(&c.Rejected, 1)
		return
	}
	defer res.Exit(sku, tok)
	if stock <= 0 {
		soldOut[sku] = true
		atomic.AddInt64(&c.SoldOutHit, 1)
		return
	}
	time.Sleep(time.Duration(50+rand.IntN(400)) * time.Microsecond) // "work"
	if l.Context().Err() != nil {
		atomic.AddInt64(&c.Lost, 1) // lock lost while working: do not write
		return
	}
	if err := res.Write(sku, tok, stock-1); err != nil {
		atomic.AddInt64(&c.Rejected, 1)
		return
	}
	atomic.AddInt64(&c.Sold, 1)
}

// reporter only ever TryLocks "report": it never queues, so while another
// node's reporter has it, it gets ErrLocked at once and counts it.
func reporter(ctx context.Context, n *lockraft.Node, c *Counts) {
	for ctx.Err() == nil {
		l, err := n.TryLock(ctx, "report")
		switch {
		case err == nil:
			atomic.AddInt64(&c.TryOK, 1)
			time.Sleep(20 * time.Millisecond) // "write the report"
			_ = l.Unlock(context.Background())
		case errors.Is(err, lockraft.ErrLocked):
			atomic.AddInt64(&c.TryLocked, 1)
		case errors.Is(err, lockraft.ErrClosed):
			return
		}
		time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond)
	}
}

// demoReentrancy: the same explicit owner locks twice and gets the same
// token; another owner cannot take it until both holds are unlocked.
func demoReentrancy(ctx context.Context, a, b *lockraft.Node) (string, error) {
	const name = "invoice/42"
	l1, err := a.Lock(ctx, name, lockraft.WithOwner("billing-run-7"))
	if err != nil {
		return "", err
	}
	l2, err := a.Lock(ctx, name, lockraft.WithOwner("billing-run-7"))
	if err != nil {
		return "", err
	}
	if l1.Token() != l2.Token() {
		return "", fmt.Errorf("reentrant Lock gave token %d, first gave %d", l2.Token(), l1.Token())
	}
	if _, err := b.TryLock(ctx, name, lockraft.WithOwner("someone-else")); !errors.Is(err, lockraft.ErrLocked) {
		return "", fmt.Errorf("TryLock by another owner while held twice: got %v, want ErrLocked", err)
	}
	if err := l2.Unlock(ctx); err != nil {
		return "", err
	}
	if _, err := b.TryLock(ctx, name, lockraft.WithOwner("someone-else")); !errors.Is(err, lockraft.ErrLocked) {
		return "", fmt.Errorf("TryLock by another owner after one of two Unlocks: got %v, want ErrLocked", err)
	}
	if err := l1.Unlock(ctx); err != nil {
		return "", err
	}
	l3, err := b.TryLock(ctx, name, lockraft.WithOwner("someone-else"))
	if err != nil {
		return "", fmt.Errorf("TryLock after both Unlocks: %v", err)
	}
	defer l3.Unlock(ctx)
	if l3.Token() <= l1.Token() {
		return "", fmt.Errorf("fencing token went backwards on %s: grant to billing-run-7 had token %d, the next grant (someone-else, node %d) has %d",
			name, l1.Token(), b.ID(), l3.Token())
	}
	return fmt.Sprintf("reentrancy: owner billing-run-7 locked %s twice on node %d, same token %d; "+
		"another owner got ErrLocked until the 2nd Unlock, then token %d", name, a.ID(), l1.Token(), l3.Token()), nil
}

// demoZombie: a holder pauses (think GC pause) past its Unlock; meanwhile
// others take the lock and write. Its late write with the old token must be
// rejected by the store.
func demoZombie(ctx context.Context, n *lockraft.Node, res Resource, sku string) (string, error) {
	l, err := n.Lock(ctx, "stock/"+sku)
	if err != nil {
		return "", err
	}
	old := l.Token()
	stock, err := res.Enter(sku, old, uint64(n.ID()), uint64(n.LeaderID()))
	if err != nil {
		l.Unlock(ctx)
		return "", err
	}
	res.Exit(sku, old)
	if err := l.Unlock(ctx); err != nil {
		return "", err
	}
	// "Paused" until someone newer has used the store.
	for ctx.Err() == nil {
		if h, err := res.Highest(sku); err == nil && h > old {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	err = res.Write(sku, old, stock-1)
	if !errors.Is(err, ErrStale) {
		return "", fmt.Errorf("zombie write with token %d: got %v, want ErrStale", old, err)
	}
	return fmt.Sprintf("fencing: a paused ex-holder of stock/%s wrote late with token %d; store rejected it", sku, old), nil
}
