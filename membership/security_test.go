package membership

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Gossip keys rotate without a restart: add the new key everywhere, make it
// primary everywhere, remove the old one. The fleet stays one throughout; a
// newcomer with only the new key joins; one with only the old key is then
// refused. (§8: gossip encrypted with a keyring, rotation documented.)
func TestGossipKeyRotation(t *testing.T) {
	oldKey, newKey := []byte("0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210")
	var fleet []*tnode
	for i := uint64(1); i <= 3; i++ {
		cfg := testConfig(i, "c1")
		cfg.Keys = [][]byte{oldKey}
		if len(fleet) > 0 {
			cfg.Seeds = []string{fleet[0].addr()}
		}
		fleet = append(fleet, startNode(t, cfg))
	}
	allSee := func(n int) func() bool {
		return func() bool {
			for _, m := range fleet {
				if len(aliveIDs(m)) != n {
					return false
				}
			}
			return true
		}
	}
	require.Eventually(t, allSee(3), 10*time.Second, tick)
	for _, step := range []func(*Membership) error{
		func(m *Membership) error { return m.AddKey(newKey) },
		func(m *Membership) error { return m.UseKey(newKey) },
		func(m *Membership) error { return m.RemoveKey(oldKey) },
	} {
		for _, m := range fleet {
			require.NoError(t, step(m.m))
		}
		// Still one fleet after each step (a full push/pull round included).
		require.Never(t, func() bool { return !allSee(3)() }, 2*FastTiming().PushPullInterval, 50*time.Millisecond)
	}
	for _, m := range fleet {
		require.Equal(t, [][]byte{newKey}, m.m.keys())
	}
	cfg := testConfig(4, "c1")
	cfg.Keys = [][]byte{newKey}
	cfg.Seeds = []string{fleet[0].addr()}
	fleet = append(fleet, startNode(t, cfg))
	require.Eventually(t, allSee(4), 10*time.Second, tick)

	cfg = testConfig(5, "c1")
	cfg.Keys = [][]byte{oldKey}
	stale := startNode(t, cfg)
	_, err := stale.m.Join([]string{fleet[0].addr()})
	require.Error(t, err)
	require.Eventually(t, func() bool {
		return fleet[0].m.refusals("gossip: Decrypt packet failed") > 0 ||
			strings.Contains(fleet[0].logs.String(), "refused gossip")
	}, 5*time.Second, tick)
	require.Len(t, aliveIDs(fleet[0]), 4)
}

// Garbage on the gossip port (UDP packets and TCP streams) is dropped and
// logged once per sender, not once per packet.
func TestGossipGarbageLoggedOnce(t *testing.T) {
	cfg := testConfig(1, "c1")
	cfg.Keys = [][]byte{[]byte("0123456789abcdef")}
	a := startNode(t, cfg)
	const tries = 50
	for i := range tries {
		c, err := net.Dial("udp", a.addr())
		require.NoError(t, err)
		_, _ = c.Write([]byte("garbage garbage garbage garbage garbage " + string(rune('a'+i%26))))
		c.Close()
	}
	for range 5 {
		c, err := net.Dial("tcp", a.addr())
		require.NoError(t, err)
		_, _ = c.Write([]byte("GET / HTTP/1.1\r\n\r\n garbage"))
		_ = c.(*net.TCPConn).CloseWrite()
		_, _ = c.Read(make([]byte, 16))
		c.Close()
	}
	var total uint64
	require.Eventually(t, func() bool {
		total = 0
		for _, k := range []string{"gossip: Decrypt packet failed", "gossip: failed to receive",
			"gossip: discarding packet with unacceptable", "gossip: discarding stream with unacceptable"} {
			total += a.m.refusals(k)
		}
		return total >= tries
	}, 10*time.Second, tick)
	lines := a.logs.CountLines("refused gossip")
	t.Logf("%d refusals, %d log lines", total, lines)
	require.LessOrEqual(t, lines, 4, "one line per kind and sender, not one per packet")
}
