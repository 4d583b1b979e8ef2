package membership

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/nettest"
)

// freePort returns a port free for TCP and UDP on loopback (nettest.FreePort:
// no other listener or connection can take it meanwhile).
func freePort(t *testing.T) int {
	t.Helper()
	return nettest.FreePort(t)
}

// TestSeedAnsweredOnlyBySelfKeepsTrying (formation, L1): on Kubernetes the
// headless Service's name first resolves to the pod itself (or to a subset
// of the pods). A member whose seeds were answered only by itself used to
// count that as joined and stop; members that came up later, with no seeds
// of their own, then formed a separate island. Here A's seeds are its own
// address and B's, B starts later without seeds: A must keep trying its
// seeds while it is alone and join B once B is up.
func TestSeedAnsweredOnlyBySelfKeepsTrying(t *testing.T) {
	pa, pb := freePort(t), freePort(t)
	ca := testConfig(1, "c1")
	ca.BindPort = pa
	ca.Seeds = []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(pa)), net.JoinHostPort("127.0.0.1", strconv.Itoa(pb))}
	a := startNode(t, ca)
	time.Sleep(200 * time.Millisecond) // B comes up later than A's first join
	cb := testConfig(2, "c1")
	cb.BindPort = pb
	b := startNode(t, cb)
	require.Eventually(t, func() bool {
		return slices.Equal(aliveIDs(a), []uint64{1, 2}) && slices.Equal(aliveIDs(b), []uint64{1, 2})
	}, 10*time.Second, tick, "A never joined B: its seeds were not retried")
}

// TestResolveSeeds: names expand to every address they resolve to, literal
// IPs pass through, duplicates go, a name without records yet and a
// malformed seed are reported without hiding the others.
func TestResolveSeeds(t *testing.T) {
	dns := map[string][]string{
		"lockraft-headless.orders.svc.cluster.local": {"10.0.0.7", "10.0.0.5", "10.0.0.6"},
		"other.example": {"10.0.0.5"},
	}
	r := seedResolver{lookup: func(_ context.Context, host string) ([]string, error) {
		if ips, ok := dns[host]; ok {
			return ips, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}}
	got, errs := r.resolve(context.Background(), []string{
		"lockraft-headless.orders.svc.cluster.local:7946", "other.example:7946", "10.0.0.9:7946",
		"not-yet.orders.svc.cluster.local:7946", "no-port", "[::1]:7946",
	})
	require.Equal(t, []string{"10.0.0.5:7946", "10.0.0.6:7946", "10.0.0.7:7946", "10.0.0.9:7946", "[::1]:7946"}, got)
	require.Len(t, errs, 2)
	require.Contains(t, errs[0].Error(), "not-yet.orders.svc.cluster.local")
	require.Contains(t, errs[1].Error(), "no-port")

	known := []Member{{Addr: "10.0.0.6:7946", State: StateAlive}, {Addr: "10.0.0.7:7946", State: StateFailed}}
	require.Equal(t, []string{"10.0.0.7:7946", "10.0.0.9:7946", "[::1]:7946"}, candidates(got, "10.0.0.5:7946", known),
		"self and alive members are skipped; a failed one is tried again")
}

// TestSeedNameReResolvedWhileForming (formation): a seed name that first
// has no records and then resolves only to this member itself, and later
// also to a second member, is looked up again until that member is joined;
// after StopSeeding the name is no longer looked up.
func TestSeedNameReResolvedWhileForming(t *testing.T) {
	pa, pb := freePort(t), freePort(t)
	var stage atomic.Int32 // 0: no records, 1: only A, 2: A and B
	var lookups atomic.Int64
	lookup := func(_ context.Context, host string) ([]string, error) {
		lookups.Add(1)
		if host != "lockraft-headless.test" || stage.Load() == 0 {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return []string{"127.0.0.1"}, nil // both members listen on 127.0.0.1, on their own ports
	}
	seeds := func(port int) []string {
		return []string{net.JoinHostPort("lockraft-headless.test", strconv.Itoa(port))}
	}
	ca := testConfig(1, "c1")
	ca.BindPort, ca.LookupHost = pa, lookup
	ca.Seeds = append(seeds(pa), seeds(pb)...)
	a := startNode(t, ca)
	require.Eventually(t, func() bool { return lookups.Load() >= 3 }, 5*time.Second, tick, "looked up again while unresolvable")
	stage.Store(1)
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, []uint64{1}, aliveIDs(a))
	cb := testConfig(2, "c1")
	cb.BindPort = pb
	b := startNode(t, cb)
	stage.Store(2)
	require.Eventually(t, func() bool { return slices.Equal(aliveIDs(b), []uint64{1, 2}) }, 10*time.Second, tick)
	a.m.StopSeeding()
	time.Sleep(50 * time.Millisecond)
	n := lookups.Load()
	time.Sleep(10 * FastTiming().RetryJoinInterval)
	require.Equal(t, n, lookups.Load(), "no lookups after StopSeeding")
}
