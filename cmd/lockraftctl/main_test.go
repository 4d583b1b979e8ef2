package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft"
)

// cluster3 starts three real nodes (gRPC on loopback, bbolt files) through
// the public API and an admin server (httptest, with operator actions) in
// front of each.
// clusterWithLeader starts cluster3 and returns its nodes, the index of the
// leader, that of a follower, and the follower's admin endpoint (the tool
// may be pointed at any member).
func clusterWithLeader(t *testing.T) (nodes []*lockraft.Node, lead, fol int, ep string) {
	t.Helper()
	nodes, srvs := cluster3(t)
	lead = leaderIndex(nodes)
	require.GreaterOrEqual(t, lead, 0)
	fol = (lead + 1) % 3
	return nodes, lead, fol, srvs[fol].URL
}

func cluster3(t *testing.T) ([]*lockraft.Node, []*httptest.Server) {
	t.Helper()
	var lns []net.Listener
	var peers []string
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		lns = append(lns, ln)
		peers = append(peers, ln.Addr().String())
	}
	dir := t.TempDir()
	nodes := make([]*lockraft.Node, 3)
	srvs := make([]*httptest.Server, 3)
	for i := range 3 {
		n, err := lockraft.Join(peers, lockraft.WithDataDir(filepath.Join(dir, fmt.Sprint(i))), lockraft.WithListener(lns[i]),
			lockraft.WithListenAddr(peers[i]), lockraft.WithTimings(20*time.Millisecond, 10),
			lockraft.WithSessionTTL(2*time.Second), lockraft.WithTuning(lockraft.Tuning{KeepaliveInterval: 100 * time.Millisecond}))
		require.NoError(t, err)
		nodes[i] = n
		srvs[i] = httptest.NewServer(n.AdminHandler(lockraft.WithOperatorActions()))
	}
	closedAfterTest(t, nodes, srvs)
	awaitOneLeader(t, nodes, 10*time.Second)
	return nodes, srvs
}

// closedAfterTest closes the admin servers and the nodes when the test ends.
func closedAfterTest(t *testing.T, nodes []*lockraft.Node, srvs []*httptest.Server) {
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for i, n := range nodes {
			srvs[i].Close()
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				n.Close(ctx)
			})
		}
		wg.Wait()
	})
}

// awaitOneLeader waits until every node names the same leader.
func awaitOneLeader(t *testing.T, nodes []*lockraft.Node, within time.Duration) {
	require.Eventually(t, func() bool {
		l := nodes[0].LeaderID()
		for _, n := range nodes[1:] {
			if n.LeaderID() != l {
				return false
			}
		}
		return l != 0
	}, within, 10*time.Millisecond)
}

func ctl(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func leaderIndex(nodes []*lockraft.Node) int {
	for i, n := range nodes {
		if n.LeaderID() == n.ID() {
			return i
		}
	}
	return -1
}

// TestCtlAgainstCluster (L2 and S2 as an operator sees them): every
// command against a real 3-node cluster's admin handler: status, members,
// locks, lock (holder and queue in order), JSON output, leader transfer,
// member remove, and the errors with their exit codes.
func TestCtlAgainstCluster(t *testing.T) {
	nodes, srvs := cluster3(t)
	lead := leaderIndex(nodes)
	require.GreaterOrEqual(t, lead, 0)
	fol := (lead + 1) % 3
	ep := srvs[fol].URL
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	h, err := nodes[lead].Lock(ctx, "stock/sku-a", lockraft.WithOwner("order-17"))
	require.NoError(t, err)
	got := make(chan *lockraft.Lock, 2)
	for i, w := range []int{fol, (lead + 2) % 3} {
		go func() {
			l, err := nodes[w].Lock(ctx, "stock/sku-a", lockraft.WithOwner(fmt.Sprintf("waiter-%d", i+1)))
			if err == nil {
				got <- l
			}
		}()
		require.Eventually(t, func() bool {
			v, _, err := nodes[lead].InspectLock(ctx, "stock/sku-a")
			return err == nil && len(v.Waiters) == i+1
		}, 5*time.Second, 10*time.Millisecond)
	}

	// status shows the follower's applied table, which may be an append
	// behind the leader's read above (seen under CI: "1 waiters").
	var code int
	var out, errs string
	require.Eventually(t, func() bool {
		code, out, errs = ctl("-endpoint", ep, "status")
		return code == exitOK && strings.Contains(out, "1 held, 2 waiters (longest queue 2)")
	}, 5*time.Second, 10*time.Millisecond, "the follower's status never showed the holder and both waiters: %s %s", out, errs)
	require.Contains(t, out, fmt.Sprintf("leader   %s", nodes[lead].ID()))
	require.Contains(t, out, "ready    yes")
	t.Logf("status:\n%s", out)

	code, out, errs = ctl("-endpoint", ep, "lock", "stock/sku-a")
	require.Equal(t, exitOK, code, errs)
	t.Logf("lock:\n%s", out)
	require.Contains(t, out, fmt.Sprintf("holder    order-17 on member %s", nodes[lead].ID()))
	require.Contains(t, out, fmt.Sprintf("token     %d", h.Token()))
	i1, i2 := strings.Index(out, "waiter-1"), strings.Index(out, "waiter-2")
	require.True(t, i1 > 0 && i2 > i1, "waiters in queue order")
	require.Contains(t, out, fmt.Sprintf("1  waiter-1  %s", nodes[fol].ID()))

	code, out, _ = ctl("lock", "stock/sku-a", "-endpoint", ep, "-o", "json")
	require.Equal(t, exitOK, code)
	var lv lockraft.LockView
	require.NoError(t, json.Unmarshal([]byte(out), &lv))
	require.Equal(t, "order-17", lv.Holder.Owner)
	require.Equal(t, []string{"waiter-1", "waiter-2"}, []string{lv.Waiters[0].Owner, lv.Waiters[1].Owner})
	require.Equal(t, 2, lv.Waiters[1].Position)

	code, out, _ = ctl("-endpoint", ep, "lock", "free/one")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "free/one is free")

	for i := range 4 {
		l, err := nodes[fol].Lock(ctx, fmt.Sprintf("stock/sku-%c", 'b'+i))
		require.NoError(t, err)
		defer l.Unlock(ctx)
	}
	code, out, _ = ctl("-endpoint", ep, "locks", "stock/", "-limit", "3")
	require.Equal(t, exitOK, code)
	require.Equal(t, 1+3+1, strings.Count(out, "\n"), out) // header, 3 rows, "more after"
	require.Contains(t, out, `(more after "stock/sku-c"`)
	// A default owner names its member as the MEMBER column does.
	fid := lockraft.MemberID(nodes[fol].ID()).String()
	require.Regexp(t, `stock/sku-b\s+node-`+fid+`/call-\d+\s+`+fid+`\s`, out)
	code, out, _ = ctl("-endpoint", ep, "-o", "json", "locks", "stock/")
	require.Equal(t, exitOK, code)
	var page lockraft.LocksPage
	require.NoError(t, json.Unmarshal([]byte(out), &page))
	require.Len(t, page.Locks, 5)

	code, out, _ = ctl("-endpoint", ep, "members")
	require.Equal(t, exitOK, code)
	t.Logf("members:\n%s", out)
	require.Equal(t, 3, strings.Count(out, " voter "))
	require.Equal(t, 1, strings.Count(out, " yes     yes "), out) // one leader, healthy

	// Errors and exit codes.
	code, _, errs = ctl("-endpoint", "http://127.0.0.1:1", "status")
	require.Equal(t, exitUnreachable, code)
	require.Contains(t, errs, "cannot reach the admin endpoint http://127.0.0.1:1")
	code, _, _ = ctl("-endpoint", ep, "frobnicate")
	require.Equal(t, exitUsage, code)
	code, _, _ = ctl("-endpoint", ep, "-o", "yaml", "status")
	require.Equal(t, exitUsage, code)
	// Removing the leader, asked of a follower: the leader refuses.
	code, _, errs = ctl("-endpoint", ep, "member", "remove", nodes[lead].ID().String())
	require.Equal(t, exitServerError, code)
	require.Contains(t, errs, "transfer leadership first")
	require.Contains(t, errs, "refused")

	// Leader transfer through a follower's endpoint, to that follower.
	code, out, errs = ctl("-endpoint", ep, "leader", "transfer", nodes[fol].ID().String())
	require.Equal(t, exitOK, code, errs)
	require.Contains(t, out, "leader is now "+nodes[fol].ID().String())
	require.Eventually(t, func() bool { return leaderIndex(nodes) == fol }, 5*time.Second, 10*time.Millisecond)

	require.NoError(t, h.Unlock(ctx))
	for range 2 {
		require.NoError(t, (<-got).Unlock(ctx))
	}

	// Member removal through a follower's endpoint (the old leader's): it
	// asks the leader.
	victim := (fol + 1) % 3
	code, out, errs = ctl("-endpoint", srvs[lead].URL, "member", "remove", nodes[victim].ID().String())
	require.Equal(t, exitOK, code, errs)
	require.Contains(t, out, "removed "+nodes[victim].ID().String())
	code, out, _ = ctl("-endpoint", ep, "members")
	require.Equal(t, exitOK, code)
	require.NotContains(t, out, nodes[victim].ID().String())
}

// TestCtlWithoutQuorum: with two of three members down, a read that needs
// the leader fails within -timeout with the handler's own answer (exit 1,
// not "cannot reach"), and says that -stale gives the member's own view;
// with -stale it answers from that member's table.
func TestCtlWithoutQuorum(t *testing.T) {
	nodes, lead, fol, ep := clusterWithLeader(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := nodes[fol].Lock(ctx, "stock/sku-q", lockraft.WithOwner("order-9"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		v, found, err := nodes[fol].InspectLock(ctx, "stock/sku-q", lockraft.Stale())
		return err == nil && found && v.Holder != nil
	}, 5*time.Second, 10*time.Millisecond, "the follower applied its grant")
	for _, i := range []int{lead, (fol + 1) % 3} {
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		nodes[i].Close(cctx)
		ccancel()
	}

	code, out, errs := ctl("-endpoint", ep, "-timeout", "1s", "lock", "stock/sku-q")
	require.Equal(t, exitServerError, code, "%s%s", out, errs)
	require.Contains(t, errs, "HTTP 503, unavailable")
	require.Contains(t, errs, "-stale shows this member's own view")
	code, out, errs = ctl("-endpoint", ep, "-timeout", "1s", "locks")
	require.Equal(t, exitServerError, code, "%s%s", out, errs)
	require.Contains(t, errs, "-stale")

	code, out, errs = ctl("-endpoint", ep, "-timeout", "1s", "-stale", "lock", "stock/sku-q")
	require.Equal(t, exitOK, code, errs)
	require.Contains(t, out, "holder    order-9 on member "+nodes[fol].ID().String())
	code, out, errs = ctl("-endpoint", ep, "-timeout", "1s", "-stale", "locks")
	require.Equal(t, exitOK, code, errs)
	require.Contains(t, out, "order-9")
}

// TestCtlLockCatalogue: `lock NAME` on a name of the lock catalogue lists
// every hold (what it holds, token, member) and every waiter with what it
// asks for, in queue order; `locks` counts the further holds.
func TestCtlLockCatalogue(t *testing.T) {
	nodes, lead, fol, ep := clusterWithLeader(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sem := nodes[lead].Semaphore("pool/db", 3)
	p1, err := sem.Acquire(ctx, 2, lockraft.WithOwner("batch-1"))
	require.NoError(t, err)
	p2, err := sem.Acquire(ctx, 1, lockraft.WithOwner("batch-2"), lockraft.WithLease(time.Minute))
	require.NoError(t, err)
	got := make(chan *lockraft.Permit, 1)
	go func() {
		p, err := nodes[fol].Semaphore("pool/db", 3).Acquire(ctx, 2, lockraft.WithOwner("batch-3"))
		if err == nil {
			got <- p
		}
	}()
	require.Eventually(t, func() bool {
		v, _, err := nodes[lead].InspectLock(ctx, "pool/db")
		return err == nil && len(v.Waiters) == 1
	}, 5*time.Second, 10*time.Millisecond)

	code, out, errs := ctl("-endpoint", ep, "lock", "pool/db")
	require.Equal(t, exitOK, code, errs)
	t.Logf("lock:\n%s", out)
	require.Contains(t, out, "pool/db (semaphore)")
	require.Contains(t, out, "3 in use of 3")
	require.Contains(t, out, "holds    2")
	lead1 := nodes[lead].ID()
	require.Contains(t, out, fmt.Sprintf("1  batch-1  %s", lead1))
	require.Contains(t, out, fmt.Sprintf("2 permits  %d", p1.Token()))
	require.Contains(t, out, fmt.Sprintf("1 permits  %d", p2.Token()))
	require.Contains(t, out, "1m0s")
	require.Contains(t, out, "waiters 1")
	require.Contains(t, out, fmt.Sprintf("1  batch-3  %s", nodes[fol].ID()))

	code, out, errs = ctl("-endpoint", ep, "locks", "pool/")
	require.Equal(t, exitOK, code, errs)
	require.Contains(t, out, "batch-1 (+1 more)")

	require.NoError(t, p1.Release(ctx))
	p3 := <-got
	require.NoError(t, p3.Release(ctx))
	require.NoError(t, p2.Release(ctx))
}

// gossip3 starts three gossip founders through the public API, each with an
// admin server (operator actions on), and waits for their leader.
func gossip3(t *testing.T) ([]*lockraft.Node, []*httptest.Server) {
	t.Helper()
	founders := []string{"ctl-0", "ctl-1", "ctl-2"}
	nodes := make([]*lockraft.Node, 3)
	srvs := make([]*httptest.Server, 3)
	var seeds []string
	for i := range 3 {
		g := lockraft.Gossip{Name: founders[i], Founders: founders, Timing: lockraft.FastGossipTiming()}
		n, err := lockraft.Join(seeds, lockraft.WithDataDir(t.TempDir()), lockraft.WithGossip(g),
			lockraft.WithTimings(20*time.Millisecond, 10), lockraft.WithSessionTTL(2*time.Second),
			lockraft.WithTuning(lockraft.Tuning{KeepaliveInterval: 100 * time.Millisecond}))
		require.NoError(t, err)
		nodes[i] = n
		srvs[i] = httptest.NewServer(n.AdminHandler(lockraft.WithOperatorActions()))
		seeds = []string{n.GossipAddr()}
	}
	closedAfterTest(t, nodes, srvs)
	awaitOneLeader(t, nodes, 20*time.Second)
	return nodes, srvs
}

// TestCtlMembersGossip: the members table names each member's gossip name,
// and a member removed from the configuration that gossip still reports
// alive (it stopped serving, its process runs on) shows as removed and not
// healthy, not as a healthy light member.
func TestCtlMembersGossip(t *testing.T) {
	nodes, srvs := gossip3(t)
	lead := leaderIndex(nodes)
	ep := srvs[lead].URL
	code, out, errs := ctl("-endpoint", ep, "members")
	require.Equal(t, exitOK, code, errs)
	t.Logf("members:\n%s", out)
	require.Contains(t, out, "ID                NAME   ROLE   LEADER  HEALTHY")
	for i, n := range nodes {
		require.Contains(t, out, fmt.Sprintf("%s  ctl-%d  voter", n.ID(), i))
	}

	victim := (lead + 1) % 3
	code, out, errs = ctl("-endpoint", ep, "member", "remove", nodes[victim].ID().String())
	require.Equal(t, exitOK, code, errs)
	require.Eventually(t, func() bool {
		_, out, _ = ctl("-endpoint", ep, "members")
		return strings.Contains(out, fmt.Sprintf("%s  ctl-%d  removed  no      no       -", nodes[victim].ID(), victim))
	}, 10*time.Second, 50*time.Millisecond, "the removed member, still in gossip, shows as removed: %s", out)
	t.Logf("members after the removal:\n%s", out)
	require.NotContains(t, out, " light ")
	require.Contains(t, out, "(removed: no longer in the raft configuration")
	code, out, errs = ctl("-endpoint", ep, "-o", "json", "members")
	require.Equal(t, exitOK, code, errs)
	var mv lockraft.MembersView
	require.NoError(t, json.Unmarshal([]byte(out), &mv))
	for _, m := range mv.Members {
		if m.ID == nodes[victim].ID() {
			require.Equal(t, lockraft.RoleRemoved, m.Role)
			require.False(t, m.Healthy)
			require.Equal(t, fmt.Sprintf("ctl-%d", victim), m.GossipName)
		}
	}
}
