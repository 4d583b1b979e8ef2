package forward

import "sync"

// maxQueue is how many items a sender holds; beyond it new ones are
// dropped (the retry paths recover them).
const maxQueue = 8192

// sender sends queued items from one goroutine at a time, all items queued
// meanwhile in one call. The goroutine is started by run (Host.Go) when the
// first item is queued, and exits when the queue is empty or stop is
// closed (the items it holds are dropped then).
type sender[T any] struct {
	mu      sync.Mutex
	items   []T
	running bool
	send    func([]T)    // one call (the sender's goroutine)
	run     func(func()) // starts the goroutine (Host.Go)
	stop    <-chan struct{}
}

// add queues item (the loop).
func (b *sender[T]) add(item T) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.items) >= maxQueue {
		return // dropped: the retry paths recover it
	}
	b.items = append(b.items, item)
	if !b.running {
		b.running = true
		b.run(b.drain)
	}
}

// busy reports whether items are queued or a send is in flight.
func (b *sender[T]) busy() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.running || len(b.items) > 0
}

func (b *sender[T]) drain() {
	for {
		b.mu.Lock()
		items := b.items
		b.items = nil
		if len(items) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		select {
		case <-b.stop:
			b.mu.Lock()
			b.items, b.running = nil, false
			b.mu.Unlock()
			return
		default:
		}
		b.send(items)
	}
}
