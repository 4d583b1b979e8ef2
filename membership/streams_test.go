package membership

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/nettest"
)

// The gossip-stream attack
//
// memberlist gives every TCP connection to the gossip port a goroutine and
// keeps it, with its file descriptor, until the stream ends or TCPTimeout
// passes; a stream is read before anything is decrypted, so anyone who can
// reach the port can open them. Unbounded, idle connections at a few
// thousand a second take tens of thousands of file descriptors (and the
// node's other sockets and files fail). The streams a member holds must be
// bounded, whoever opens them and from how many addresses, and a member must
// still join.

// acceptedSockets counts the sockets this process holds that were accepted
// on local TCP port port (Linux: /proc/net/tcp and /proc/self/fd).
func acceptedSockets(t *testing.T, port int) int {
	raw, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Skipf("cannot read the socket table here: %v", err)
	}
	want := fmt.Sprintf(":%04X", port)
	inodes := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n")[1:] {
		f := strings.Fields(line)
		// local_address, state (0A: listening), inode
		if len(f) > 9 && strings.HasSuffix(f[1], want) && f[3] != "0A" {
			inodes["socket:["+f[9]+"]"] = true
		}
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot list open files here: %v", err)
	}
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && inodes[l] {
			n++
		}
	}
	return n
}

func TestAttackGossipStreamsBounded(t *testing.T) {
	cfg := testConfig(1, "c")
	cfg.Timing.TCPTimeout = 10 * time.Second // as LANTiming: idle streams live long
	a := startNode(t, cfg)
	nt := a.m.transport
	nt.table.mu.Lock()
	nt.table.max = 64 // the default is 1,024: fewer sockets for the test to hold
	nt.table.mu.Unlock()
	port := nt.port
	// Five addresses of 30 idle connections each: more than the bound in
	// all, and more than one address's share from each.
	var idle nettest.IdleConns
	const holders = 5 * 30
	for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"} {
		nettest.HoldIdle(t, a.addr(), src, 30, 20*time.Millisecond, &idle)
	}
	require.Eventually(t, func() bool { return idle.Dialed.Load() >= holders }, 10*time.Second, 5*time.Millisecond,
		"the idle connections were not all opened (%d of %d)", idle.Dialed.Load(), holders)
	// What the member holds: the sockets it accepted on its gossip port, at
	// most over a second of the attack.
	held := 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		held = max(held, acceptedSockets(t, port))
	}
	require.LessOrEqual(t, held, 64+1, "gossip streams the member holds open")

	// A member joins through the attacked one within a few seconds.
	cfgB := testConfig(2, "c")
	cfgB.Seeds = []string{a.addr()}
	b := startNode(t, cfgB)
	require.Eventually(t, func() bool { return len(aliveIDs(a)) == 2 && len(aliveIDs(b)) == 2 }, 8*time.Second, 10*time.Millisecond,
		"the member did not join while idle streams were held")
	t.Logf("the member held at most %d streams for %d idle connections (bound 64); refused %d, evicted %d", held, idle.Open.Load(),
		nt.table.refused.Load(), nt.table.evicted.Load())
}
