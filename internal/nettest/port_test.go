package nettest

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortOutsideEphemeral: where the kernel says its ephemeral range,
// FreePort's ports lie below it, and each can be bound for TCP and UDP.
func TestFreePortOutsideEphemeral(t *testing.T) {
	lo, hi := belowEphemeral()
	for range 50 {
		p := FreePort(t)
		if hi > lo && (p < lo || p >= hi) {
			t.Fatalf("port %d outside [%d, %d)", p, lo, hi)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		u, err := net.ListenPacket("udp", addr)
		if err != nil {
			t.Fatalf("port %d (udp): %v", p, err)
		}
		u.Close()
		l.Close()
	}
	if hi <= lo {
		t.Logf("no ephemeral range known here: ports were the kernel's choice")
	}
}
