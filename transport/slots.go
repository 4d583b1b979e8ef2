package transport

import "github.com/lockraft/lockraft/internal/netrules"

// Connection slots
//
// A node accepts at most MaxConns connections at once (admissionLimits.conns),
// those still in their handshake included: a slot is taken when a
// connection is accepted, before anything is read from it. Anyone who can
// reach the port can take slots by connecting and saying nothing, each for
// up to handshakeTimeout; if that kept every slot, no member could open a
// new connection (a restarted member could not rejoin). So:
//
//   - Once half the slots are taken, a source address (an IPv4 address, an
//     IPv6 /64) with a quarter of the slots' worth of connections still in
//     their handshake (handshakesPerSource) gets no more until one of them
//     ends. One source cannot take more than half the slots with handshakes.
//   - When every slot is taken, the source with the most connections in
//     their handshake gives up its oldest one to the new connection, if it
//     has at least two more than the new connection's source; otherwise the
//     new one is refused. A member connecting from an address of its own
//     then always gets in, unless the idle connections come from about as
//     many addresses as there are slots. (Giving the slot of the oldest
//     handshake instead, whatever its source, let an attacker that reopens
//     its connections quickly keep every slot young, and members out.)
//
// A connection leaves its handshake when it is admitted (admitConn) or
// closed. Admitted connections are bounded per member (connsPerPeer).

// handshakesPerSource is admissionLimits.handshakesPerSource by default: a
// quarter of the slots, at least 16. One source then holds at most half the
// slots with handshakes (it gets none beyond half while it has this many),
// and many members behind one address (one host, a NAT gateway) that
// reconnect at once on a busy machine, where a handshake can take hundreds
// of milliseconds, are not turned away.
func handshakesPerSource(conns int) int { return max(conns/4, 16) }

// handshakes is admission's record of the connections in their handshake
// (under admission.mu).
type handshakes struct {
	shaking map[*trackedConn]struct{}
	from    map[string]int // by source (netrules.SourceOf)
}

// place gives tc a slot (admissionListener). It returns why it may not
// have one ("" if it has), and a connection whose slot it took, which the
// caller closes (it no longer counts).
func (a *admission) place(tc *trackedConn) (evicted *trackedConn, refused string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := &a.hs
	if n := a.lim.handshakesPerSource; n > 0 && len(a.conns) >= a.lim.conns/2 && h.from[tc.source] >= n {
		return nil, "too many handshakes from this source"
	}
	if len(a.conns) >= a.lim.conns {
		big, most := netrules.Busiest(h.from)
		if most < h.from[tc.source]+2 {
			return nil, "too many connections"
		}
		for c := range h.shaking {
			if c.source == big && (evicted == nil || c.accepted.Before(evicted.accepted)) {
				evicted = c
			}
		}
		a.forgetLocked(evicted)
	}
	a.conns[tc] = struct{}{}
	if h.shaking == nil {
		h.shaking, h.from = make(map[*trackedConn]struct{}), make(map[string]int)
	}
	h.shaking[tc] = struct{}{}
	h.from[tc.source]++
	return evicted, ""
}

// handshakeDoneLocked: tc was admitted; its slot is no longer a
// handshake's. a.mu held.
func (a *admission) handshakeDoneLocked(tc *trackedConn) {
	h := &a.hs
	if _, ok := h.shaking[tc]; !ok {
		return
	}
	delete(h.shaking, tc)
	if h.from[tc.source]--; h.from[tc.source] <= 0 {
		delete(h.from, tc.source)
	}
}

// forgetLocked frees tc's slot (it is closed, or being closed). a.mu held.
func (a *admission) forgetLocked(tc *trackedConn) {
	delete(a.conns, tc)
	a.handshakeDoneLocked(tc)
}
