package node

import (
	"context"
	"sync/atomic"
	"time"
)

// Values the node's goroutines share without a lock (the loop writes them;
// callers, the keepalive sender and the transport read them), and waiting
// on a channel as on a context.

// laterTime is a time that only moves forward. Safe for concurrent use.
type laterTime struct{ p atomic.Pointer[time.Time] }

func (l *laterTime) Load() time.Time {
	if p := l.p.Load(); p != nil {
		return *p
	}
	return time.Time{}
}

// Advance moves l to t if t is later.
func (l *laterTime) Advance(t time.Time) {
	for {
		cur := l.p.Load()
		if cur != nil && !t.After(*cur) {
			return
		}
		if l.p.CompareAndSwap(cur, &t) {
			return
		}
	}
}

// watchedID is an id (the leader this node sees, its session) that any
// goroutine reads lock-free and can wait on for a change. The loop sets it
// (and a light member's forwarding the leader).
type watchedID struct {
	v     atomic.Uint64
	epoch atomic.Pointer[chan struct{}] // closed (and replaced) whenever v changes
}

// Load is the id now.
func (w *watchedID) Load() uint64 { return w.v.Load() }

// set records id and wakes whoever waits on a change.
func (w *watchedID) set(id uint64) {
	if w.v.Swap(id) == id {
		return
	}
	ch := make(chan struct{})
	if old := w.epoch.Swap(&ch); old != nil {
		close(*old)
	}
}

// changed returns a channel that is closed at the next change.
func (w *watchedID) changed() <-chan struct{} {
	if c := w.epoch.Load(); c != nil {
		return *c
	}
	ch := make(chan struct{})
	if w.epoch.CompareAndSwap(nil, &ch) {
		return ch
	}
	return *w.epoch.Load()
}

// ctxDone is a context that is done when ch is closed.
func ctxDone(ch <-chan struct{}) context.Context { return chanContext(ch) }

type chanContext <-chan struct{}

func (c chanContext) Deadline() (deadline time.Time, ok bool) { return }
func (c chanContext) Done() <-chan struct{}                   { return c }
func (c chanContext) Err() error {
	select {
	case <-c:
		return context.Canceled
	default:
		return nil
	}
}
func (c chanContext) Value(any) any { return nil }
