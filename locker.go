package lockraft

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Locker returns a sync.Locker for the mutex name, for code that wants
// Lock()/Unlock() without a context (a library taking a sync.Locker, say).
//
// The trade-off, because sync.Locker's methods cannot return an error nor
// hand out a Context or a token:
//
//   - Lock blocks until the lock is granted, however long that takes: there
//     is no context to bound it. A wait the node cannot finish as is (the
//     session expired, no leader reachable: ErrSessionExpired,
//     ErrUnavailable) is retried, so Lock also blocks through a cluster
//     outage. Any other error means Lock can never succeed (the node is
//     closed or stopped, the name is invalid or in use as another kind of
//     lock): Lock panics with it, as sync.Mutex panics on misuse, rather
//     than return as if it held the lock.
//   - The critical section cannot learn that the lock was lost (the node's
//     session expired, or the lease of WithLease ran out): it has no
//     Context to watch and no token to fence with. Use Locker only where
//     that is acceptable or fenced by other means; otherwise use Lock.
//   - Unlock releases the lock held by the last Lock. Unlock without a held
//     Lock panics, as sync.Mutex's does. If the lock was already lost,
//     Unlock just forgets it. Unlock waits up to a minute for the release to
//     be applied; past that the node keeps retrying it in the background.
//   - Each Lock is its own owner (WithOwner is ignored), so the Locker
//     excludes goroutines of this process from each other as sync.Mutex
//     does, and is not reentrant. WithLease applies to each Lock.
func (n *Node) Locker(name string, opts ...LockOption) sync.Locker {
	return &locker{n: n, name: name, opts: opts}
}

type locker struct {
	n    *Node
	name string
	opts []LockOption
	mu   sync.Mutex
	held *Lock
}

func (l *locker) Lock() {
	opts := append(append([]LockOption(nil), l.opts...), WithOwner(""))
	for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		h, err := l.n.Lock(context.Background(), l.name, opts...)
		if err == nil {
			l.mu.Lock()
			l.held = h
			l.mu.Unlock()
			return
		}
		if !errors.Is(err, ErrSessionExpired) && !errors.Is(err, ErrUnavailable) {
			panic(fmt.Sprintf("lockraft: Locker(%q).Lock: %v", l.name, err))
		}
		time.Sleep(backoff)
	}
}

func (l *locker) Unlock() {
	l.mu.Lock()
	h := l.held
	l.held = nil
	l.mu.Unlock()
	if h == nil {
		panic(fmt.Sprintf("lockraft: Locker(%q).Unlock of an unlocked lock", l.name))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = h.Unlock(ctx) // ErrNotHeld: already lost; a timeout: the node keeps retrying
}
