package simnet

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockraft/lockraft/transport"
)

// Settle is how long, under testing/synctest, the network waits past an
// event's due time before it executes the event: the one nanosecond of fake
// time that can only pass once every goroutine of the bubble is durably
// blocked. Everything else that happens at the due instant (a node's own
// timers firing, the work they start) has then run, so what an event finds
// never depends on how those goroutines interleave with the network's. Each
// execution is followed by one more Settle before the next, so two events
// due at the same instant are executed a nanosecond apart. Outside a bubble
// the network does not wait at all.
const Settle = time.Nanosecond

// ErrNetworkClosed is returned by Start after Close.
var ErrNetworkClosed = errors.New("simnet: network closed")

// Network is one simulated network: the links between the endpoints of one
// cluster. Make it with New (inside the synctest bubble when simulating:
// its goroutine, timers and channels must belong to the bubble), start one
// endpoint per node with Start, and Close it after the nodes. All methods
// are safe for concurrent use.
type Network struct {
	seed   uint64
	start  time.Time
	settle time.Duration
	hook   func(Event)

	mu        sync.Mutex
	closed    bool
	endpoints map[uint64]*Endpoint      // the open endpoint of each id
	roles     map[uint64]transport.Role // the role of each id's last endpoint (PeerRole)
	links     map[linkID]*link
	queue     eventQueue
	faults    faults
	paused    map[uint64]bool
	held      map[uint64][]*event // events for a paused endpoint, in arrival order
	trace     traceHash

	wake     chan struct{} // cap 1: an event was queued
	done     chan struct{} // closed by Close
	loopDone chan struct{} // closed when run returns
}

// Option configures a Network.
type Option func(*Network)

// WithPolicy sets the policy of every link from the start (default: no
// loss, no delay).
func WithPolicy(p Policy) Option {
	mustValid(p)
	return func(n *Network) { n.faults.policy = p }
}

// WithTrace calls f with every event the network executes, in execution
// order, from the network's goroutine (see Event), possibly while a Handler
// method of the event's endpoint is running. f must not block on the
// network's progress nor close an endpoint or the Network; it may call the
// Network's other methods.
func WithTrace(f func(Event)) Option {
	return func(n *Network) { n.hook = f }
}

// New makes a Network whose every random decision derives from seed, and
// starts its delivery goroutine (stopped by Close).
func New(seed uint64, opts ...Option) *Network {
	n := &Network{
		seed:      seed,
		start:     time.Now(),
		endpoints: make(map[uint64]*Endpoint),
		roles:     make(map[uint64]transport.Role),
		links:     make(map[linkID]*link),
		paused:    make(map[uint64]bool),
		held:      make(map[uint64][]*event),
		trace:     newTraceHash(),
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		loopDone:  make(chan struct{}),
	}
	n.faults.init()
	if inBubble(n.start) {
		n.settle = Settle
	}
	for _, o := range opts {
		o(n)
	}
	go n.run()
	return n
}

// inBubble reports whether now is a synctest bubble's fake time, which
// starts at midnight UTC, 1 January 2000; no real clock reads that.
func inBubble(now time.Time) bool {
	return now.Before(time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC))
}

// Addr is the synthetic address of id's endpoint: what its Addr returns and
// what its peers pass to AddPeer.
func Addr(id uint64) string { return fmt.Sprintf("sim-%d", id) }

// Start starts the endpoint of node cfg.LocalID; it is a transport.NewNetwork
// and validates cfg as transport.New does (ListenAddr, Listener, TLS and the
// byte limits are ignored). The endpoint's SnapshotDir is created and
// cleared of interrupted transfers. An id has at most one open endpoint;
// once it is closed, Start may start the id again (a restarted node).
func (n *Network) Start(cfg transport.Config) (transport.Network, error) {
	e, err := newEndpoint(n, cfg)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.closed:
		e.cancel()
		return nil, ErrNetworkClosed
	case n.endpoints[e.id] != nil:
		e.cancel()
		return nil, fmt.Errorf("simnet: node %016x already has an open endpoint (address %s in use)", e.id, Addr(e.id))
	}
	n.endpoints[e.id] = e
	n.roles[e.id] = e.role
	return e, nil
}

var _ transport.NewNetwork = (*Network)(nil).Start

// Close closes every endpoint still open, stops the delivery goroutine and
// waits for it. Events still queued or held are discarded. Close is
// idempotent; afterwards Start fails and Send drops.
func (n *Network) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		<-n.loopDone
		return nil
	}
	n.closed = true // from now on nothing is queued and nothing starts
	open := make([]*Endpoint, 0, len(n.endpoints))
	for _, e := range n.endpoints {
		open = append(open, e)
	}
	n.queue = nil
	n.held = make(map[uint64][]*event)
	n.mu.Unlock()
	close(n.done)
	for _, e := range open {
		_ = e.Close()
	}
	<-n.loopDone
	return nil
}

// TraceHash is a running FNV-1a hash over every event executed so far
// (Event.fold): two runs of the same seed and the same test, under
// synctest, have the same hash at the same point.
func (n *Network) TraceHash() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.trace.sum
}

// Executed is how many events were executed so far.
func (n *Network) Executed() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.trace.count
}

// record folds ev into the trace and shows it to the hook. Called only by
// the delivery goroutine, without n.mu.
func (n *Network) record(ev Event) {
	ev.At = time.Since(n.start)
	n.mu.Lock()
	n.trace.add(ev)
	n.mu.Unlock()
	if n.hook != nil {
		n.hook(ev)
	}
}

// endpointLocked returns the open endpoint of id, or nil. n.mu held.
func (n *Network) endpointLocked(id uint64) *Endpoint {
	return n.endpoints[id]
}

// enter marks a Handler (or Config callback) of e as about to run, if e is
// still open; its Close waits for leave. n.mu held.
func (e *Endpoint) enterLocked() bool {
	if e.closed {
		return false
	}
	e.busy.Add(1)
	return true
}

func (e *Endpoint) leave() { e.busy.Done() }

// reach finds the receiver of what sender sent from→to and enters it (the
// caller leaves it), or says why it is not reached: the sender closed, the
// event was lost on the way (lost; "" if not), the link is cut, or no
// endpoint is open at to.
func (n *Network) reach(sender *Endpoint, from, to uint64, lost string) (dst *Endpoint, why string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	dst = n.endpointLocked(to)
	switch {
	case sender.closed:
		return nil, lostSender
	case lost != "":
		return nil, lost
	case !n.faults.up(from, to):
		return nil, lostCut
	case dst == nil || !dst.enterLocked():
		return nil, lostNoNode
	}
	return dst, ""
}
