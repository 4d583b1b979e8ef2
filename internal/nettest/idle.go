package nettest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// IdleConns is what HoldIdle reports: its dials, and its connections open.
type IdleConns struct {
	Dialed, Open atomic.Int64
}

// HoldIdle keeps n TCP connections to addr open from the local address
// src and says nothing on them (no TLS, no preface), each reopened after
// pause once the other side closes it, until the test ends: what anyone who
// can reach a port can do. It skips the test where src cannot be a source
// address (Linux routes all of 127.0.0.0/8 to loopback; other systems may
// not).
func HoldIdle(t *testing.T, addr, src string, n int, pause time.Duration, c *IdleConns) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); wg.Wait() })
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	probe, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("cannot connect from %s here: %v", src, err)
	}
	_ = probe.Close()
	for range n {
		wg.Go(func() {
			for {
				if conn, err := d.Dial("tcp", addr); err == nil {
					c.Dialed.Add(1)
					c.Open.Add(1)
					closed := make(chan struct{})
					go func() { _, _ = conn.Read(make([]byte, 1)); close(closed) }()
					select {
					case <-closed:
					case <-stop:
					}
					_ = conn.Close()
					c.Open.Add(-1)
				}
				select {
				case <-stop:
					return
				case <-time.After(pause):
				}
			}
		})
	}
}
