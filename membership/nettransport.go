package membership

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sockaddr "github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"

	"github.com/lockraft/lockraft/internal/netrules"
	"github.com/lockraft/lockraft/internal/refuse"
)

// netTransport is memberlist's network layer for this package: one UDP
// socket for probes and gossip, one TCP listener on the same port for
// joins and push/pull, as memberlist's own NetTransport, with one
// difference that matters to an embedding service: a received packet gets
// a buffer of its own size. memberlist's transport reads every packet into
// a fresh 64 KiB buffer, and an idle member receives a few packets a
// second (probes, acks, gossip of a few hundred bytes): that was a quarter
// of a megabyte of garbage a second, most of an idle member's allocations,
// and a garbage collection every twenty seconds (bench/cmd/embedcost).
// Here a packet is read into one reused buffer and copied out.
//
// Ownership: memberlist may keep a packet's Buf after it was delivered
// (messages are handed to another goroutine), so every Packet owns its
// buffer; only the read buffer is reused, by the one reading goroutine.
type netTransport struct {
	udp     *net.UDPConn
	tcp     *net.TCPListener
	bindIP  net.IP
	port    int
	packets chan *memberlist.Packet
	streams chan net.Conn
	log     *slog.Logger
	table   streamTable // the open streams (streams.go)
	refused *refuse.Log // set before memberlist starts; nil logs nothing

	shutdown atomic.Bool
	once     sync.Once
	wg       sync.WaitGroup
}

// maxPacket is the largest UDP payload; memberlist's packets are far
// smaller (its UDPBufferSize, 1400 bytes by default).
const maxPacket = 65536

// udpReceiveBuffer is the socket receive buffer asked for (best effort), so
// a burst of gossip is not dropped while the reader is scheduled.
const udpReceiveBuffer = 2 << 20

// bindRetries: with port 0 the kernel picks the TCP port, and the UDP bind
// to the same number can race with another process; retry a few times.
const bindRetries = 10

var _ memberlist.NodeAwareTransport = (*netTransport)(nil)

// newNetTransport binds TCP and UDP on addr:port (port 0: a free port, the
// same for both).
func newNetTransport(addr string, port int, log *slog.Logger) (*netTransport, error) {
	ip := net.ParseIP(addr)
	if ip == nil {
		return nil, fmt.Errorf("gossip bind address %q is not an IP address", addr)
	}
	attempts := 1
	if port == 0 {
		attempts = bindRetries
	}
	var err error
	for range attempts {
		var t *netTransport
		if t, err = bindNetTransport(ip, port, log); err == nil {
			return t, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	return nil, err
}

func bindNetTransport(ip net.IP, port int, log *slog.Logger) (*netTransport, error) {
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port})
	if err != nil {
		return nil, fmt.Errorf("gossip TCP listener: %w", err)
	}
	port = tcp.Addr().(*net.TCPAddr).Port
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip, Port: port})
	if err != nil {
		tcp.Close()
		return nil, fmt.Errorf("gossip UDP socket: %w", err)
	}
	_ = udp.SetReadBuffer(udpReceiveBuffer) // best effort: the kernel may cap it
	t := &netTransport{
		udp:     udp,
		tcp:     tcp,
		bindIP:  ip,
		port:    port,
		packets: make(chan *memberlist.Packet),
		streams: make(chan net.Conn),
		log:     log,
		table:   streamTable{max: maxGossipStreams},
	}
	t.wg.Add(2)
	go t.readPackets()
	go t.acceptStreams()
	return t, nil
}

// readPackets hands every received packet to memberlist in a buffer of its
// own size.
func (t *netTransport) readPackets() {
	defer t.wg.Done()
	buf := make([]byte, maxPacket)
	for {
		n, from, err := t.udp.ReadFrom(buf)
		ts := time.Now() // as close to the read as possible: memberlist times probes with it
		if err != nil {
			if t.shutdown.Load() {
				return
			}
			t.log.Warn("gossip: reading a UDP packet", "err", err)
			continue
		}
		if n < 1 {
			continue // memberlist needs at least the message type
		}
		own := make([]byte, n)
		copy(own, buf)
		t.packets <- &memberlist.Packet{Buf: own, From: from, Timestamp: ts}
	}
}

// acceptStreams hands accepted TCP connections to memberlist, backing off
// on errors (a full file table) rather than spinning.
func (t *netTransport) acceptStreams() {
	defer t.wg.Done()
	const baseDelay, maxDelay = 5 * time.Millisecond, time.Second
	var delay time.Duration
	for {
		conn, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.shutdown.Load() {
				return
			}
			delay = min(max(2*delay, baseDelay), maxDelay)
			t.log.Warn("gossip: accepting a TCP connection", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		st := &trackedStream{Conn: conn, table: &t.table, source: netrules.SourceOf(conn.RemoteAddr()), opened: time.Now()}
		evicted, ok := t.table.place(st)
		if evicted != nil {
			t.refused.Note("gossip stream", evicted.source, "reason", "its place given to a newer connection",
				"open_for", st.opened.Sub(evicted.opened).Round(time.Millisecond))
			_ = evicted.Close()
		}
		if !ok {
			t.refused.Refuse("gossip stream", st.source, "reason", "too many open streams", "max", maxGossipStreams)
			_ = conn.Close()
			continue
		}
		t.streams <- st
	}
}

// FinalAdvertiseAddr is the address other members reach this one at: the
// advertise address if one is configured, else the bound one; bound to a
// wildcard, a private address of this host.
func (t *netTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if port == 0 {
		port = t.port
	}
	if ip != "" {
		adv := net.ParseIP(ip)
		if adv == nil {
			return nil, 0, fmt.Errorf("gossip advertise address %q is not an IP address", ip)
		}
		if v4 := adv.To4(); v4 != nil {
			adv = v4
		}
		return adv, port, nil
	}
	if !t.bindIP.IsUnspecified() {
		return t.bindIP, t.port, nil
	}
	private, err := sockaddr.GetPrivateIP()
	if err != nil {
		return nil, 0, fmt.Errorf("gossip bound to %s: finding a private address to advertise: %w", t.bindIP, err)
	}
	adv := net.ParseIP(private)
	if adv == nil {
		return nil, 0, fmt.Errorf("gossip bound to %s: no private address to advertise; set an advertise address", t.bindIP)
	}
	return adv, t.port, nil
}

// WriteTo sends one packet to addr ("ip:port").
func (t *netTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return time.Time{}, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return time.Time{}, fmt.Errorf("gossip address %q: bad port", addr)
	}
	to := &net.UDPAddr{IP: net.ParseIP(host), Port: port}
	if to.IP == nil {
		// A name, not an address (memberlist passes addresses; a seed is
		// resolved before it gets here): resolve it.
		if to, err = net.ResolveUDPAddr("udp", addr); err != nil {
			return time.Time{}, err
		}
	}
	_, err = t.udp.WriteTo(b, to)
	return time.Now(), err
}

// WriteToAddress is WriteTo for memberlist's node-aware calls.
func (t *netTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, a.Addr)
}

// PacketCh delivers received packets; each Packet owns its Buf.
func (t *netTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// DialTimeout opens a stream (join, push/pull) to addr.
func (t *netTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.Dial("tcp", addr)
}

// DialAddressTimeout is DialTimeout for memberlist's node-aware calls.
func (t *netTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

// StreamCh delivers accepted streams.
func (t *netTransport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown closes both sockets and waits for the reading goroutines.
// memberlist calls it once, first thing in its own Shutdown, while its
// handlers still read the channels; in case one does not, a packet or
// stream handed over meanwhile is dropped here rather than leaving its
// goroutine blocked.
// It may be called again (a failed memberlist.Create) and then does nothing.
func (t *netTransport) Shutdown() error {
	t.once.Do(func() {
		t.shutdown.Store(true)
		t.tcp.Close()
		t.udp.Close()
		done := make(chan struct{})
		go func() { t.wg.Wait(); close(done) }()
		for {
			select {
			case <-done:
				return
			case <-t.packets:
			case c := <-t.streams:
				c.Close()
			}
		}
	})
	return nil
}
