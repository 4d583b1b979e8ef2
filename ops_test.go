package lockraft_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft"
	"github.com/lockraft/lockraft/internal/cluster"
)

// registries makes a Prometheus registry for each of members 1..n.
func registries(n int) map[uint64]*prometheus.Registry {
	regs := map[uint64]*prometheus.Registry{}
	for id := uint64(1); id <= uint64(n); id++ {
		regs[id] = prometheus.NewRegistry()
	}
	return regs
}

// withRegistries gives each member of a cluster its own registry, regs[id].
func withRegistries(regs map[uint64]*prometheus.Registry) func(cluster.Spec) lockraft.Option {
	return func(s cluster.Spec) lockraft.Option { return lockraft.WithMetrics(regs[s.ID]) }
}

// after is the member k places after id among members 1..3, cyclically.
func after(id uint64, k int) uint64 { return (id-1+uint64(k))%3 + 1 }

// metric finds one sample of family name whose labels include want.
func metric(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range want {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

func value(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	m := metric(t, reg, name, labels)
	require.NotNil(t, m, "no %s%v", name, labels)
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetHistogram() != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	t.Fatalf("%s: unexpected type", name)
	return 0
}

func ops(kind, result string) map[string]string {
	return map[string]string{"primitive": "mutex", "kind": kind, "result": result}
}

// TestMetricsAfterScriptedWorkload (L1, L2, L4 as an operator sees them): a
// scripted workload on one node of a 3-node cluster, then its registry is
// scraped: each operation counted by kind and result, the acquire-wait and
// grant-after-head-of-queue histograms counted once per granted Lock and
// per queued grant, the lock-table gauges showing the held lock and its
// waiter, raft gauges consistent across the three registries.
func TestMetricsAfterScriptedWorkload(t *testing.T) {
	regs := registries(3)
	c := joinCluster(t, 3, 0, withRegistries(regs))
	lead := leader(t, c)
	a, b := c.Member(after(lead, 1)), c.Member(after(lead, 2)) // two followers
	reg := regs[after(lead, 1)]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for i := range 5 { // 5 × lock ok, unlock ok
		l, err := a.Lock(ctx, fmt.Sprintf("m/%d", i))
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	hb, err := b.Lock(ctx, "m/hot") // held elsewhere
	require.NoError(t, err)
	for range 2 { // 2 × trylock locked
		_, err := a.TryLock(ctx, "m/hot")
		require.ErrorIs(t, err, lockraft.ErrLocked)
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond) // 1 × lock deadline_exceeded
	_, err = a.Lock(short, "m/hot")
	cancelShort()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// Its wait ends within one commit (S4), not before Lock returns: on a
	// loaded machine the waiter seen below could still be this one, and
	// the next Lock would reach the head only when its cancel applied.
	require.Eventually(t, func() bool {
		v, _, err := a.InspectLock(ctx, "m/hot", lockraft.Stale())
		return err == nil && len(v.Waiters) == 0
	}, 5*time.Second, 10*time.Millisecond, "the timed-out Lock's wait never ended")
	got := make(chan *lockraft.Lock, 1)
	go func() { // 1 × lock ok after queueing at the head
		l, err := a.Lock(ctx, "m/hot")
		if err == nil {
			got <- l
		}
	}()
	require.Eventually(t, func() bool {
		v, _, err := a.InspectLock(ctx, "m/hot", lockraft.Stale())
		return err == nil && len(v.Waiters) == 1
	}, 5*time.Second, 10*time.Millisecond)
	// The gauges are read from this replica's table when scraped; the
	// waiter is in it once the Inspect above saw it, but give the scrape
	// the same patience.
	require.Eventually(t, func() bool {
		return value(t, reg, "lockraft_locks_held", nil)+value(t, reg, "lockraft_lock_waiters", nil) == 2 &&
			value(t, reg, "lockraft_lock_longest_queue", nil) == 1
	}, 5*time.Second, 10*time.Millisecond, "one name held, one waiter: held %v, waiters %v, longest queue %v",
		value(t, reg, "lockraft_locks_held", nil), value(t, reg, "lockraft_lock_waiters", nil),
		value(t, reg, "lockraft_lock_longest_queue", nil))
	time.Sleep(50 * time.Millisecond) // the queue head waits a little for the holder
	require.NoError(t, hb.Unlock(ctx))
	la := <-got
	require.NoError(t, la.Unlock(ctx))
	require.ErrorIs(t, la.Unlock(ctx), lockraft.ErrNotHeld) // 1 × unlock not_held

	require.Equal(t, 6.0, value(t, reg, "lockraft_operations_total", ops("lock", "ok")))
	require.Equal(t, 1.0, value(t, reg, "lockraft_operations_total", ops("lock", "deadline_exceeded")))
	require.Equal(t, 2.0, value(t, reg, "lockraft_operations_total", ops("trylock", "locked")))
	require.Equal(t, 0.0, value(t, reg, "lockraft_operations_total", ops("trylock", "ok")))
	require.Equal(t, 6.0, value(t, reg, "lockraft_operations_total", ops("unlock", "ok")))
	require.Equal(t, 1.0, value(t, reg, "lockraft_operations_total", ops("unlock", "not_held")))
	require.Equal(t, 6.0, value(t, reg, "lockraft_acquire_wait_seconds", map[string]string{"primitive": "mutex"}),
		"one acquire-wait observation per granted Lock")
	head := metric(t, reg, "lockraft_queue_head_wait_seconds", nil).GetHistogram()
	require.Equal(t, uint64(1), head.GetSampleCount(), "one grant from the queue")
	require.GreaterOrEqual(t, head.GetSampleSum(), 0.04, "it waited at the head ≥ 50 ms minus timer slack")
	// Commands of this node: 6 granted acquires + 1 abandoned one and its
	// cancel + 2 trylocks + 6 releases; an abandoned acquire is settled by
	// its cancel, so at least 15 commits.
	require.GreaterOrEqual(t, value(t, reg, "lockraft_commit_duration_seconds", nil), 15.0)
	require.Positive(t, value(t, reg, "lockraft_fsync_duration_seconds", nil))
	require.Eventually(t, func() bool { return value(t, reg, "lockraft_keepalive_duration_seconds", nil) >= 1 },
		15*time.Second, 50*time.Millisecond, "a keepalive (one per KeepaliveInterval) is observed")
	require.Equal(t, 0.0, value(t, reg, "lockraft_locks_held", nil))
	require.Equal(t, 1.0, value(t, reg, "lockraft_session_open", nil))
	require.Equal(t, 1.0, value(t, reg, "lockraft_node_role", map[string]string{"role": "voter"}))
	require.Equal(t, 3.0, value(t, reg, "lockraft_sessions", nil))

	leaders := 0.0
	for id, r := range regs {
		leaders += value(t, r, "lockraft_raft_is_leader", nil)
		require.Equal(t, 1.0, value(t, r, "lockraft_node_up", nil), "node %d", id)
	}
	require.Equal(t, 1.0, leaders, "exactly one registry reports leading")
	lr := regs[lead]
	for _, n := range []*lockraft.Node{a, b} {
		require.NotNil(t, metric(t, lr, "lockraft_raft_peer_lag_entries", map[string]string{"peer": n.ID().String(), "role": "voter"}))
	}
	require.Nil(t, metric(t, reg, "lockraft_raft_peer_lag_entries", nil), "followers report no peer lag")

	// No lock name or owner ever becomes a label value.
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				require.NotContains(t, lp.GetValue(), "m/", "%s has a lock name as a label", mf.GetName())
			}
		}
	}
}

// TestWithMetricsTwiceOnOneRegistry: a second node on the same registry is
// refused with a clear error instead of panicking; WrapRegistererWith lets
// both register.
func TestWithMetricsTwiceOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	addr := freeAddr(t)
	n1, err := lockraft.Join([]string{addr}, lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr(addr), fast(),
		lockraft.WithMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"replica": "a"}, reg)))
	require.NoError(t, err)
	defer n1.Close(context.Background())
	addr2 := freeAddr(t)
	_, err = lockraft.Join([]string{addr2}, lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr(addr2), fast(),
		lockraft.WithMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"replica": "a"}, reg)))
	require.ErrorIs(t, err, lockraft.ErrInvalidConfig)
	addr3 := freeAddr(t)
	n3, err := lockraft.Join([]string{addr3}, lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr(addr3), fast(),
		lockraft.WithMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"replica": "b"}, reg)))
	require.NoError(t, err)
	defer n3.Close(context.Background())
}

// adminGet fetches path from the handler and decodes its JSON.
func adminGet(t *testing.T, h http.Handler, method, path string, out any) int {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	if out != nil {
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), out), rec.Body.String())
	}
	return rec.Code
}

// TestReadiness (L1): /readyz is 503 before the node has a session (its
// peers are not up: no leader, no session), 200 once it serves, 503 again
// after it loses its leader (cut off from the others), and 200 after the
// partition heals; /healthz stays 200 throughout (alive) and is 503 once the
// node is closed.
func TestReadiness(t *testing.T) {
	c := joinCluster(t, 3, 1, withRegistries(registries(3))) // member 1 alone: 2 and 3 start later
	h := c.Member(1).AdminHandler()
	var body map[string]any
	require.Equal(t, http.StatusServiceUnavailable, adminGet(t, h, "GET", "/readyz", &body))
	require.Equal(t, false, body["ready"])
	require.Contains(t, body["reason"], "no leader")
	require.Equal(t, http.StatusOK, adminGet(t, h, "GET", "/healthz", nil))

	require.NoError(t, c.StartMember(2))
	require.NoError(t, c.StartMember(3))
	require.Eventually(t, func() bool { return adminGet(t, h, "GET", "/readyz", nil) == http.StatusOK }, 10*time.Second, 10*time.Millisecond)

	c.CutOff(1)
	require.Eventually(t, func() bool {
		return adminGet(t, h, "GET", "/readyz", &body) == http.StatusServiceUnavailable
	}, 10*time.Second, 10*time.Millisecond)
	require.Contains(t, body["reason"], "no leader")
	require.Equal(t, http.StatusOK, adminGet(t, h, "GET", "/healthz", nil), "alive while partitioned")
	c.Heal()
	require.Eventually(t, func() bool { return adminGet(t, h, "GET", "/readyz", nil) == http.StatusOK }, 15*time.Second, 10*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, c.Member(1).Close(ctx))
	c.Stopped(1)
	require.Equal(t, http.StatusServiceUnavailable, adminGet(t, h, "GET", "/healthz", nil))
	require.Equal(t, http.StatusServiceUnavailable, adminGet(t, h, "GET", "/readyz", nil))
}

// TestAdminHandler: the JSON views and the operator actions, with their
// errors as JSON and HTTP status codes.
func TestAdminHandler(t *testing.T) {
	c := joinCluster(t, 3, 0, withRegistries(registries(3)))
	lead := leader(t, c)
	fol := after(lead, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.Member(lead).Lock(ctx, "stock/sku-a", lockraft.WithOwner("order-17"))
	require.NoError(t, err)
	defer l.Unlock(ctx)

	require.NoError(t, c.Member(fol).Ready(ctx), "the follower's session opens")
	ro := c.Member(fol).AdminHandler()
	var st lockraft.StatusView
	require.Equal(t, 200, adminGet(t, ro, "GET", "/status", &st))
	require.Equal(t, c.Member(fol).ID(), st.ID)
	require.Equal(t, c.Member(lead).ID(), st.Leader)
	require.Equal(t, "voter", st.Role)
	require.True(t, st.Ready)
	require.Equal(t, lockraft.Version, st.Version)

	var lv lockraft.LockView
	require.Equal(t, 200, adminGet(t, ro, "GET", "/lock?name=stock/sku-a", &lv))
	require.Equal(t, "order-17", lv.Holder.Owner)
	require.Equal(t, l.Token(), lv.Holder.Token)
	var e map[string]any
	require.Equal(t, 404, adminGet(t, ro, "GET", "/lock?name=free/one", &e))
	require.Equal(t, "not_found", e["code"])
	require.Equal(t, 400, adminGet(t, ro, "GET", "/lock", &e))
	require.Equal(t, 400, adminGet(t, ro, "GET", "/locks?limit=0", &e))
	require.Equal(t, 400, adminGet(t, ro, "GET", "/lock?name=x&timeout=forever", &e))
	require.Equal(t, 405, adminGet(t, ro, "POST", "/lock?name=x", &e))
	require.Equal(t, 404, adminGet(t, ro, "GET", "/nope", &e))

	var page lockraft.LocksPage
	require.Equal(t, 200, adminGet(t, ro, "GET", "/locks?prefix=stock/&limit=10", &page))
	require.Len(t, page.Locks, 1)

	var mv lockraft.MembersView
	require.Equal(t, 200, adminGet(t, ro, "GET", "/members", &mv))
	require.True(t, mv.FromLeader)
	require.Len(t, mv.Members, 3)
	for _, m := range mv.Members {
		require.Equal(t, "voter", m.Role)
		require.True(t, m.Healthy)
		require.True(t, m.LagKnown)
	}

	// Operator actions: off by default.
	require.Equal(t, 403, adminGet(t, ro, "POST", "/leader/transfer", &e))
	require.Equal(t, "forbidden", e["code"])
	op := c.Member(fol).AdminHandler(lockraft.WithOperatorActions())
	// Transfer asked of a follower, to that follower.
	var tr map[string]string
	require.Equal(t, 200, adminGet(t, op, "POST", "/leader/transfer?to="+c.Member(fol).ID().String(), &tr))
	require.Equal(t, c.Member(fol).ID().String(), tr["leader"])
	require.Eventually(t, func() bool { return c.Member(fol).LeaderID() == c.Member(fol).ID() }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, 404, adminGet(t, op, "POST", "/leader/transfer?to=00000000000000ff", &e))
	require.Equal(t, "not_member", e["code"])
	require.Equal(t, 400, adminGet(t, op, "POST", "/members/remove?id=zz", &e))

	// Removal, asked of a follower (the old leader), which asks the leader:
	// refused for the leader itself, done for another member.
	newLead, other := fol, after(fol, 1)
	opOld := c.Member(lead).AdminHandler(lockraft.WithOperatorActions())
	require.Equal(t, 409, adminGet(t, opOld, "POST", "/members/remove?id="+c.Member(newLead).ID().String(), &e))
	require.Equal(t, "refused", e["code"], "%v", e)
	var rm map[string]string
	require.Equal(t, 200, adminGet(t, opOld, "POST", "/members/remove?id="+c.Member(other).ID().String(), &rm))
	require.Equal(t, c.Member(other).ID().String(), rm["removed"])
	require.Equal(t, 200, adminGet(t, op, "GET", "/members", &mv))
	require.Len(t, mv.Members, 2, "%+v", mv)
	for _, m := range mv.Members {
		require.NotEqual(t, c.Member(other).ID(), m.ID)
	}
	// The removed member stops being part of the cluster; stop it.
	ctxc, cancelc := context.WithTimeout(ctx, time.Second)
	c.Member(other).Close(ctxc)
	cancelc()
	c.Stopped(other)
}
