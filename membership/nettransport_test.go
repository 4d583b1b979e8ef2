package membership

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func startNetTransport(t *testing.T) *netTransport {
	t.Helper()
	tr, err := newNetTransport("127.0.0.1", 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Shutdown() })
	return tr
}

func (t *netTransport) addr() string {
	return net.JoinHostPort(t.bindIP.String(), strconv.Itoa(t.port))
}

func nextPacket(t *testing.T, tr *netTransport) *memberlist.Packet {
	t.Helper()
	select {
	case p := <-tr.PacketCh():
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no packet within 10 s")
		return nil
	}
}

// An idle member's allocations were mostly memberlist's 64 KiB read buffer
// per received packet (the cost of embedding). Each packet must own a
// buffer of its own size — not a slice of a shared buffer, which memberlist
// (handing messages to another goroutine) could see overwritten.
func TestReceivedPacketsOwnRightSizedBuffers(t *testing.T) {
	a, b := startNetTransport(t), startNetTransport(t)
	if got := b.udp.LocalAddr().(*net.UDPAddr).Port; got != b.port || b.tcp.Addr().(*net.TCPAddr).Port != b.port {
		t.Fatalf("port 0 must give TCP and UDP one port: udp %d, tcp %v, port %d", got, b.tcp.Addr(), b.port)
	}
	sizes := []int{1, 300, 1400, 9000}
	var got []*memberlist.Packet
	for i, n := range sizes {
		msg := bytes.Repeat([]byte{byte('a' + i)}, n)
		if _, err := a.WriteTo(msg, b.addr()); err != nil {
			t.Fatal(err)
		}
		p := nextPacket(t, b)
		if len(p.Buf) != n || cap(p.Buf) != n {
			t.Fatalf("packet %d: len %d cap %d, want both %d", i, len(p.Buf), cap(p.Buf), n)
		}
		if from := p.From.(*net.UDPAddr); from.Port != a.port {
			t.Fatalf("packet %d from %v, want port %d", i, from, a.port)
		}
		if p.Timestamp.IsZero() {
			t.Fatalf("packet %d: no receive time", i)
		}
		got = append(got, p)
	}
	for i, p := range got { // earlier buffers untouched by later reads
		if want := bytes.Repeat([]byte{byte('a' + i)}, sizes[i]); !bytes.Equal(p.Buf, want) {
			t.Fatalf("packet %d changed after later packets were read", i)
		}
	}
}

func TestNetTransportStreams(t *testing.T) {
	a, b := startNetTransport(t), startNetTransport(t)
	c, err := a.DialAddressTimeout(memberlist.Address{Addr: b.addr(), Name: "b"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var s net.Conn
	select {
	case s = <-b.StreamCh():
	case <-time.After(10 * time.Second):
		t.Fatal("no stream accepted within 10 s")
	}
	defer s.Close()
	if _, err := c.Write([]byte("push-pull")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("push-pull"))
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "push-pull" {
		t.Fatalf("read %q, %v", buf, err)
	}
}

func TestNetTransportAdvertiseAddr(t *testing.T) {
	tr := startNetTransport(t)
	ip, port, err := tr.FinalAdvertiseAddr("", 0)
	if err != nil || !ip.Equal(net.IPv4(127, 0, 0, 1)) || port != tr.port {
		t.Fatalf("bound address: %v %d %v, want 127.0.0.1 %d", ip, port, err, tr.port)
	}
	ip, port, err = tr.FinalAdvertiseAddr("10.1.2.3", 0)
	if err != nil || ip.String() != "10.1.2.3" || len(ip) != net.IPv4len || port != tr.port {
		t.Fatalf("advertise address, port 0: %v (len %d) %d %v", ip, len(ip), port, err)
	}
	if _, port, _ = tr.FinalAdvertiseAddr("10.1.2.3", 7946); port != 7946 {
		t.Fatalf("advertise port: %d, want 7946", port)
	}
	if _, _, err = tr.FinalAdvertiseAddr("not-an-ip", 0); err == nil {
		t.Fatal("an advertise address that is not an IP must be refused")
	}
}

func TestNetTransportShutdownStopsReadersAndIsIdempotent(t *testing.T) {
	a, b := startNetTransport(t), startNetTransport(t)
	// A packet nobody reads leaves the reader blocked handing it over;
	// Shutdown must still return.
	if _, err := a.WriteTo([]byte("x"), b.addr()); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { b.Shutdown(); b.Shutdown(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return")
	}
	if _, err := a.WriteTo([]byte("x"), b.addr()); err != nil {
		t.Logf("write after the peer closed: %v (either way is fine)", err)
	}
	if _, err := b.WriteTo([]byte("x"), a.addr()); err == nil {
		t.Fatal("a shut transport must not send")
	}
}
