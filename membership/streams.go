package membership

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockraft/lockraft/internal/netrules"
)

// Gossip streams
//
// memberlist gives every TCP connection to the gossip port (joins,
// push/pull) a goroutine and keeps it, with its file descriptor, until the
// stream ends or TCPTimeout passes. A stream is read before anything in it
// is decrypted, so anyone who can reach the port can open them; unbounded,
// idle connections would take the node's file descriptors. So the streams
// open at once are bounded (maxGossipStreams), and:
//
//   - once half are taken, a source address (an IPv4 address, an IPv6 /64)
//     with a quarter of the bound open gets no more until one ends;
//   - when all are taken, the source with the most open streams gives up
//     its oldest to the new connection, if it has at least two more than the
//     new connection's source; otherwise the new one is closed. So a member
//     connecting from an address of its own always gets in, unless the idle
//     connections come from about as many addresses as there are places.
//
// A stream leaves the table when it is closed, by memberlist or by the
// table (trackedStream.Close).

// maxGossipStreams bounds the gossip streams open at once.
const maxGossipStreams = 1024

// streamTable is the open gossip streams.
type streamTable struct {
	max int // maxGossipStreams; tests make it smaller

	mu   sync.Mutex
	open map[*trackedStream]struct{}
	from map[string]int // open streams by source (netrules.SourceOf)

	refused, evicted atomic.Uint64
}

// trackedStream is an accepted gossip stream: it leaves the table when
// closed, by whoever closes it.
type trackedStream struct {
	net.Conn
	table  *streamTable
	source string
	opened time.Time
	once   sync.Once
}

func (s *trackedStream) Close() error {
	s.once.Do(func() { s.table.forget(s) })
	return s.Conn.Close()
}

// place gives s a place in the table. It returns whether s may be served,
// and a stream whose place it took, which the caller closes.
func (t *streamTable) place(s *trackedStream) (evicted *trackedStream, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open == nil {
		t.open, t.from = make(map[*trackedStream]struct{}), make(map[string]int)
	}
	if len(t.open) >= t.max/2 && t.from[s.source] >= t.max/4 {
		t.refused.Add(1)
		return nil, false
	}
	if len(t.open) >= t.max {
		big, most := netrules.Busiest(t.from)
		if most < t.from[s.source]+2 {
			t.refused.Add(1)
			return nil, false
		}
		for o := range t.open {
			if o.source == big && (evicted == nil || o.opened.Before(evicted.opened)) {
				evicted = o
			}
		}
		t.forgetLocked(evicted)
		t.evicted.Add(1)
	}
	t.open[s] = struct{}{}
	t.from[s.source]++
	return evicted, true
}

func (t *streamTable) forget(s *trackedStream) {
	t.mu.Lock()
	t.forgetLocked(s)
	t.mu.Unlock()
}

func (t *streamTable) forgetLocked(s *trackedStream) {
	if _, ok := t.open[s]; !ok {
		return
	}
	delete(t.open, s)
	if t.from[s.source]--; t.from[s.source] <= 0 {
		delete(t.from, s.source)
	}
}
