package node

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/cluster"
	"github.com/lockraft/lockraft/internal/faults"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
)

// lostAt returns a function reporting when h's Context ended (zero if not).
func lostAt(h *Hold) func() time.Time {
	var mu sync.Mutex
	var at time.Time
	go func() {
		<-h.Context().Done()
		mu.Lock()
		at = time.Now()
		mu.Unlock()
	}()
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return at
	}
}

// grantAsync starts a waiting Acquire and reports the hold and when it came.
func grantAsync(t *testing.T, n *Node, name, owner string) (<-chan *Hold, func() time.Time) {
	ch := make(chan *Hold, 1)
	var mu sync.Mutex
	var at time.Time
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		h, err := n.Acquire(ctx, name, owner, true, 0)
		mu.Lock()
		at = time.Now()
		mu.Unlock()
		if err != nil {
			t.Errorf("waiter %s: %v", owner, err)
			close(ch)
			return
		}
		ch <- h
	}()
	return ch, func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
}

// roles are tc's leader and two of its followers, a and b.
func roles(t testing.TB, tc *cluster.Cluster[*Node]) (lead, a, b uint64) {
	t.Helper()
	lead = leader(t, tc)
	a = otherThan(tc, lead)
	return lead, a, otherThan(tc, lead, a)
}

// toldBeforeGrant waits for the waiter's grant on got and requires S5 of
// it: the holder h (who, in messages) was told it lost the lock, with cause,
// before the grant. lost is lostAt(h), got and grantedAt are grantAsync's.
// It returns the waiter's hold.
func toldBeforeGrant(t *testing.T, who string, h *Hold, cause error, lost func() time.Time, got <-chan *Hold,
	grantedAt func() time.Time) *Hold {
	t.Helper()
	h2 := <-got
	require.NotNil(t, h2)
	require.False(t, lost().IsZero(), "%s was not told before the lock was granted elsewhere", who)
	require.True(t, lost().Before(grantedAt()), "%s told at %v, waiter granted at %v", who, lost(), grantedAt())
	require.ErrorIs(t, context.Cause(h.Context()), cause)
	t.Logf("%s told %v before the waiter was granted", who, grantedAt().Sub(lost()))
	return h2
}

// grantWithin waits at most d for the waiter's grant on got (grantAsync)
// and returns the hold. failed says what went wrong if it does not come.
func grantWithin(t *testing.T, got <-chan *Hold, d time.Duration, failed string) *Hold {
	t.Helper()
	select {
	case h := <-got:
		require.NotNil(t, h, "the waiter's Acquire failed: %s", failed)
		return h
	case <-time.After(d):
		t.Fatalf("%s (waited %v)", failed, d)
		return nil
	}
}

// queueBehind has holder take name and waiter queue for it, as owners
// "holder" and "waiter". It returns the hold and, as grantAsync does, the
// waiter's grant, once the waiter's lock table shows it queued.
func queueBehind(t *testing.T, ctx context.Context, name string, holder, waiter *Node) (*Hold, <-chan *Hold, func() time.Time) {
	t.Helper()
	h, err := holder.Acquire(ctx, name, "holder", true, 0)
	require.NoError(t, err)
	got, grantedAt := grantAsync(t, waiter, name, "waiter")
	requireWaiters(t, waiter, name, 1)
	return h, got, grantedAt
}

// TestCrashedHolderReleasedAfterTTL (L3): the holder's node stops without
// Close. The next waiter, on another node, is granted once the session TTL
// has passed since the last keepalive — not before — with a higher token.
func TestCrashedHolderReleasedAfterTTL(t *testing.T) {
	tc := newCluster(t, 3)
	_, a, b := roles(t, tc)
	ctx := ctxT(t, 30*time.Second)
	h, got, _ := queueBehind(t, ctx, "cron/nightly", tc.Member(a), tc.Member(b))
	ttl := configOf(tc, a).SessionTTL
	crash := time.Now()
	tc.Crash(a)
	h2 := <-got
	require.NotNil(t, h2)
	took := time.Since(crash)
	t.Logf("crash → next grant %v (TTL %v): %v after the TTL", took, ttl, took-ttl)
	// The last keepalive left at most one interval before the crash.
	require.GreaterOrEqual(t, took, ttl-configOf(tc, a).KeepaliveInterval, "granted before the session could have expired")
	require.Greater(t, h2.Token(), h.Token())
}

// TestPartitionedHolderLearnsFirst (S5): the holder's node is cut off from
// the majority. Its handle's Context must end before the majority grants
// the lock to the waiter; both instants are taken on this process's
// monotonic clock. Cases: the holder on a follower, the holder on the
// leader, and a leader failover on the majority side in the middle.
func TestPartitionedHolderLearnsFirst(t *testing.T) {
	cases := []struct {
		name        string
		size        int
		holderLeads bool
		failoverMid bool
	}{
		{"holder-on-follower", 3, false, false},
		{"holder-on-leader", 3, true, false},
		{"failover-in-the-middle", 5, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tc := newCluster(t, c.size)
			lead := leader(t, tc)
			a := otherThan(tc, lead)
			if c.holderLeads {
				a = lead
			}
			b := otherThan(tc, lead, a)
			ctx := ctxT(t, 30*time.Second)
			h, got, grantedAt := queueBehind(t, ctx, "stock/sku-42", tc.Member(a), tc.Member(b))
			lost := lostAt(h)
			tc.CutOff(a)
			if c.failoverMid {
				time.Sleep(configOf(tc, a).SessionTTL / 3) // let the old leader arm a deadline first
				tc.Crash(lead)
			}
			h2 := toldBeforeGrant(t, "the holder", h, lockerr.ErrSessionExpired, lost, got, grantedAt)
			require.Greater(t, h2.Token(), h.Token())
			// The cut-off node comes back, opens a new session and works.
			tc.Heal()
			h3, err := tc.Member(a).Acquire(ctx, "after-heal", "a", true, 0)
			require.NoError(t, err)
			require.NoError(t, h3.Release(ctx))
		})
	}
}

// TestSessionsSurviveFailover: holds of live nodes outlast a leader
// failover and more than a TTL after it (the new leader restarts their
// deadlines and keepalives keep them).
func TestSessionsSurviveFailover(t *testing.T) {
	tc := newCluster(t, 3)
	lead, a, b := roles(t, tc)
	ctx := ctxT(t, 30*time.Second)
	ha, err := tc.Member(a).Acquire(ctx, "x", "a", true, 0)
	require.NoError(t, err)
	hb, err := tc.Member(b).Acquire(ctx, "y", "b", true, 0)
	require.NoError(t, err)
	tc.Crash(lead)
	leader(t, tc)
	// Wait out more than a TTL on the new leader, counting from now.
	ttl := configOf(tc, a).SessionTTL
	deadline := time.Now().Add(ttl + ttl/2)
	for time.Now().Before(deadline) {
		require.NoError(t, ha.Context().Err())
		require.NoError(t, hb.Context().Err())
		time.Sleep(50 * time.Millisecond)
	}
	_, err = tc.Member(b).Acquire(ctx, "x", "b2", false, 0)
	require.ErrorIs(t, err, lockerr.ErrLocked, "a's lock must still be held")
	require.NoError(t, ha.Release(ctx))
	require.NoError(t, hb.Release(ctx))
}

// TestLeaseExpiryAndRenewal: a lock with its own lease is released when the
// lease runs out (holder told first, waiter granted with a higher token),
// and kept for as long as it is renewed.
func TestLeaseExpiryAndRenewal(t *testing.T) {
	tc := newCluster(t, 3)
	_, a, b := roles(t, tc)
	ctx := ctxT(t, 30*time.Second)
	lease := 600 * time.Millisecond

	// Renewed: kept well past the lease.
	h, err := tc.Member(a).Acquire(ctx, "leased", "a", true, lease)
	require.NoError(t, err)
	until := time.Now().Add(3 * lease)
	for time.Now().Before(until) {
		require.NoError(t, h.Renew(ctx))
		time.Sleep(lease / 4)
	}
	require.NoError(t, h.Context().Err(), "a renewed lease must not expire")

	// Not renewed: expires; the holder is told before the waiter gets it.
	lost := lostAt(h)
	got, grantedAt := grantAsync(t, tc.Member(b), "leased", "b")
	h2 := toldBeforeGrant(t, "the holder", h, lockerr.ErrLeaseExpired, lost, got, grantedAt)
	require.Greater(t, h2.Token(), h.Token())
	require.ErrorIs(t, h.Renew(ctx), lockerr.ErrNotHeld)
	require.ErrorIs(t, h.Release(ctx), lockerr.ErrNotHeld)
	require.NoError(t, h2.Release(ctx))

	// A waiter granted from the queue with a lease gets a dated lease too.
	h3, err := tc.Member(a).Acquire(ctx, "leased2", "a", true, 0)
	require.NoError(t, err)
	done := make(chan *Hold, 1)
	go func() {
		h, err := tc.Member(b).Acquire(ctx, "leased2", "b", true, lease)
		if err != nil {
			t.Error(err)
		}
		done <- h
	}()
	requireWaiters(t, tc.Member(b), "leased2", 1)
	time.Sleep(lease) // the waiter's first send is now older than its lease
	require.NoError(t, h3.Release(ctx))
	h4 := <-done
	require.NotNil(t, h4)
	require.NoError(t, h4.Context().Err(), "a fresh grant from the queue starts its lease now")
	require.NoError(t, h4.Release(ctx))
}

// TestLockDelay: after a session expires holding a lock, the name is not
// granted for LockDelay (TryLock fails); a clean Unlock has no delay.
func TestLockDelay(t *testing.T) {
	delay := 800 * time.Millisecond
	var mu sync.Mutex
	var delayedAt, grantedAt time.Time
	tc := newCluster(t, 3, func(c *Config) {
		c.LockDelay = delay
		if c.ID == 3 {
			c.Observer = func(r ApplyRecord) {
				for _, ev := range r.Events {
					if ev.Name != "d" {
						continue
					}
					mu.Lock()
					switch {
					case ev.Kind == lockfsm.EventDelayed:
						delayedAt = time.Now()
					case ev.Kind == lockfsm.EventGranted && !delayedAt.IsZero() && grantedAt.IsZero():
						grantedAt = time.Now()
					}
					mu.Unlock()
				}
			}
		}
	})
	lead := leader(t, tc)
	a := otherThan(tc, lead, 3)
	ctx := ctxT(t, 30*time.Second)
	// A clean Unlock: no delay.
	h, err := tc.Member(a).Acquire(ctx, "d", "a", true, 0)
	require.NoError(t, err)
	require.NoError(t, h.Release(ctx))
	h, err = tc.Member(3).Acquire(ctx, "d", "c", false, 0)
	require.NoError(t, err, "no lock-delay after a clean Unlock")
	require.NoError(t, h.Release(ctx))

	_, err = tc.Member(a).Acquire(ctx, "d", "a", true, 0)
	require.NoError(t, err)
	tc.Crash(a)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return !delayedAt.IsZero() }, 10*time.Second, 5*time.Millisecond)
	_, err = tc.Member(3).Acquire(ctx, "d", "c", false, 0)
	require.ErrorIs(t, err, lockerr.ErrLocked, "TryLock during the lock-delay")
	h, err = tc.Member(3).Acquire(ctx, "d", "c", true, 0)
	require.NoError(t, err)
	mu.Lock()
	gap := grantedAt.Sub(delayedAt)
	mu.Unlock()
	t.Logf("expiry → grant %v (lock-delay %v)", gap, delay)
	require.GreaterOrEqual(t, gap, delay-2*configOf(tc, 3).TickInterval, "granted inside the lock-delay")
	require.NoError(t, h.Release(ctx))
}

func TestSessionConfigValidation(t *testing.T) {
	base := Config{ID: 1, DataDir: t.TempDir(), Members: []Member{{ID: 1, Addr: "127.0.0.1:1"}}}
	for name, mut := range map[string]func(*Config){
		"ttl shorter than 3 election timeouts": func(c *Config) { c.SessionTTL = 2 * time.Second },
		"ttl below the two-failover floor":     func(c *Config) { c.SessionTTL = MinSessionTTL(time.Second) - 100*time.Millisecond },
		"keepalive interval eats the floor":    func(c *Config) { c.SessionTTL = 6 * time.Second; c.KeepaliveInterval = 2 * time.Second },
		"keepalive longer than ttl/3":          func(c *Config) { c.KeepaliveInterval = 5 * time.Second },
		"drift ratio too large":                func(c *Config) { c.DriftRatio = 0.5 },
		"lock delay over a minute":             func(c *Config) { c.LockDelay = 2 * time.Minute },
	} {
		c := base
		mut(&c)
		err := c.Validate()
		require.True(t, errors.Is(err, lockerr.ErrInvalidConfig), "%s: %v", name, err)
	}
	require.NoError(t, base.Validate())
	atFloor := base
	atFloor.SessionTTL = MinSessionTTL(time.Second)
	require.NoError(t, atFloor.Validate(), "MinSessionTTL itself is accepted")
}

// TestDefaultTimingsKeepTheFailoverBudget: the idle-cost defaults
// (keepalives every TTL/4, heartbeats every 2 ticks) never make a TTL that
// Validate accepted before invalid: the keepalive interval shrinks toward
// TTL/10 as the TTL nears MinSessionTTL, and every TTL from the floor up
// leaves a healthy session two back-to-back failovers (config.go).
func TestDefaultTimingsKeepTheFailoverBudget(t *testing.T) {
	base := Config{ID: 1, DataDir: t.TempDir(), Members: []Member{{ID: 1, Addr: "127.0.0.1:1"}}}
	d := base.withDefaults()
	require.Equal(t, defaultSessionTTL/4, d.KeepaliveInterval, "default TTL: keepalives every quarter")
	require.Equal(t, 2, d.HeartbeatTicks)
	require.Equal(t, 200*time.Millisecond, d.heartbeatInterval())
	// Three back-to-back failovers of 2.25 election timeouts at the defaults.
	spare := d.SessionTTL - d.holderMargin() - d.KeepaliveInterval
	require.GreaterOrEqual(t, spare, 3*failoverBudget(d.electionTimeout())/2, "default TTL: three failovers")

	short := base
	short.ElectionTicks = 5
	require.Equal(t, 1, short.withDefaults().HeartbeatTicks, "an election timeout under 10 ticks beats every tick")

	et := time.Second
	for ttl := MinSessionTTL(et); ttl <= 3*defaultSessionTTL; ttl += 100 * time.Millisecond {
		c := base
		c.SessionTTL = ttl
		require.NoError(t, c.Validate(), "TTL %v", ttl)
		k := c.withDefaults().KeepaliveInterval
		require.GreaterOrEqual(t, k, ttl/10, "TTL %v", ttl)
		require.LessOrEqual(t, k, ttl/4, "TTL %v", ttl)
	}
	// Near the floor the interval is what the budget leaves, not a quarter.
	atFloor := base
	atFloor.SessionTTL = MinSessionTTL(et)
	f := atFloor.withDefaults()
	require.Less(t, f.KeepaliveInterval, f.SessionTTL/4)
	require.Equal(t, failoverBudget(et), f.SessionTTL-f.holderMargin()-f.KeepaliveInterval)
}

// TestKeepalivesSurviveSlowConfirmation: when every leadership-confirmation
// round takes longer than RetryInterval (the followers' answers to the
// leader are delayed by 3–4 ticks), keepalives are still acknowledged and
// holds are kept for more than a TTL. Before the fix a round unanswered
// after RetryInterval was failed and replaced by a fresh one, just as slow,
// and a keepalive call gave up after one KeepaliveInterval: no keepalive was
// ever acknowledged and every holder gave its locks up at the TTL, on a
// cluster that was merely slow.
//
// On the simulated network in a synctest bubble: the delays are in ticks,
// which a loaded machine stretches unevenly on real time.
func TestKeepalivesSurviveSlowConfirmation(t *testing.T) {
	synctest.Test(t, testKeepalivesSurviveSlowConfirmation)
}

func testKeepalivesSurviveSlowConfirmation(t *testing.T) {
	tc := newSimCluster(t, 3, 1, func(c *Config) { c.RetryInterval = c.TickInterval })
	lead := leader(t, tc)
	a := otherThan(tc, lead)
	ctx := ctxT(t, 30*time.Second)
	ha, err := tc.Member(a).Acquire(ctx, "x", "a", true, 0)
	require.NoError(t, err)
	hl, err := tc.Member(lead).Acquire(ctx, "y", "l", true, 0)
	require.NoError(t, err)
	tick := configOf(tc, a).TickInterval
	for _, id := range tc.IDs() {
		if id != lead {
			tc.Faults(id).SetMessagePolicy(faults.MessagePolicy{Seed: 1, Peers: []uint64{lead}, DelayRate: 1, DelayMin: 3 * tick, DelayMax: 4 * tick})
		}
	}
	ttl := configOf(tc, a).SessionTTL
	require.Never(t, func() bool { return ha.Context().Err() != nil || hl.Context().Err() != nil },
		ttl+ttl/2, 10*time.Millisecond, "a hold was given up on a slow but healthy cluster")
	for _, id := range tc.IDs() {
		tc.Faults(id).SetMessagePolicy(faults.MessagePolicy{})
	}
	require.NoError(t, ha.Release(ctx))
	require.NoError(t, hl.Release(ctx))
}
