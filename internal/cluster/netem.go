package cluster

import (
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// netem degrades the connections a node accepts: every read waits a delay
// (messages into the node arrive late) and, with some probability per read,
// the connection is reset (whatever was in flight on it is lost; gRPC
// reconnects). This is the message loss and delay we can inject from outside
// the node: per-message drop, duplication and reordering need a hook inside
// the transport (see README).
type netem struct {
	delay     atomic.Int64  // nanoseconds per read
	resetPPM  atomic.Uint32 // resets per million reads
	mu        sync.Mutex
	rng       *rand.Rand
	conns     map[net.Conn]struct{}
	resetsHit atomic.Int64
}

func newNetem(seed uint64) *netem {
	return &netem{rng: rand.New(rand.NewPCG(seed, 0x6e6574656d)), conns: map[net.Conn]struct{}{}}
}

func (e *netem) set(delay time.Duration, resetPPM uint32) {
	e.delay.Store(int64(delay))
	e.resetPPM.Store(resetPPM)
}

func (e *netem) roll() bool {
	p := e.resetPPM.Load()
	if p == 0 {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rng.Uint32N(1_000_000) < p
}

type netemListener struct {
	net.Listener
	e *netem
}

func (l netemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &netemConn{Conn: c, e: l.e}, nil
}

type netemConn struct {
	net.Conn
	e *netem
}

func (c *netemConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		if d := c.e.delay.Load(); d > 0 {
			time.Sleep(time.Duration(d))
		}
		if c.e.roll() {
			c.e.resetsHit.Add(1)
			c.Conn.Close()
			return 0, net.ErrClosed
		}
	}
	return n, err
}
