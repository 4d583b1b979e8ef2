package nettest

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreePort returns a port on 127.0.0.1 that is free for TCP and UDP right
// now, for a test that must know a member's address before the member
// binds it. Where the kernel says which range it takes ephemeral ports from
// (Linux), the port is chosen at random below that range: a listener on
// port 0 and every outgoing connection take their ports from the range, so
// none of them, in this test binary or in another running beside it, can
// take the port before the caller binds it. (A port the kernel picked was
// taken so once, while another package's test held 1,500 connections.)
// Elsewhere the kernel picks it, and it can be taken meanwhile.
func FreePort(t testing.TB) int {
	t.Helper()
	lo, hi := belowEphemeral()
	for range 200 {
		port := 0
		if hi > lo {
			port = lo + rand.IntN(hi-lo)
		}
		if p, ok := bindBoth(port); ok {
			return p
		}
	}
	t.Fatal("nettest: no free port")
	return 0
}

// FreeAddr is FreePort as an address, "127.0.0.1:port".
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}

// belowEphemeral is the band FreePort picks from: from 10,000 up to the
// first ephemeral port; an empty band where that is unknown or too low.
func belowEphemeral() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	first, err := strconv.Atoi(f[0])
	if err != nil || first <= 11000 {
		return 0, 0
	}
	return 10000, first
}

// bindBoth binds port (0: the kernel's choice) for TCP and then for UDP on
// 127.0.0.1, and lets both go; ok if both binds succeeded.
func bindBoth(port int) (int, bool) {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return 0, false
	}
	defer l.Close()
	port = l.Addr().(*net.TCPAddr).Port
	u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return 0, false
	}
	u.Close()
	return port, true
}
