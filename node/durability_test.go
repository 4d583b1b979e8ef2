package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/cluster"
	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
)

// releaseLog records, through an Observer, every hold that ends, so a test
// can see what the lock table held when a node restarted.
type releaseLog struct {
	mu       sync.Mutex
	released map[string]lockfsm.Event // by name: the last release by a session close
	granted  map[string]uint64        // by name: the last grant token
}

func newReleaseLog() *releaseLog {
	return &releaseLog{released: map[string]lockfsm.Event{}, granted: map[string]uint64{}}
}

// snapshot copies what was recorded so far.
func (r *releaseLog) snapshot() map[string]lockfsm.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]lockfsm.Event, len(r.released))
	for k, v := range r.released {
		out[k] = v
	}
	return out
}

func (r *releaseLog) observe(rec ApplyRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range rec.Events {
		switch ev.Kind {
		case lockfsm.EventReleased:
			// Only session closes: a restart replays the log, re-emitting
			// the releases that happened before the crash.
			if ev.Reason == lockfsm.ReasonSessionClosed {
				r.released[ev.Name] = ev
			}
		case lockfsm.EventGranted:
			r.granted[ev.Name] = ev.Token
		}
	}
}

// TestFullClusterCrashKeepsAcknowledgedState (S3): every node is stopped
// without any cleanup (no session close, no final lock-table commit) and
// restarted from its directory. Every acknowledged grant is still held (the
// restarted nodes then close their previous incarnation's sessions, which
// releases exactly those locks with the old tokens), every acknowledged
// release stays released, and new tokens are higher than all old ones.
func TestFullClusterCrashKeepsAcknowledgedState(t *testing.T) {
	logs := map[uint64]*releaseLog{}
	tc := newCluster(t, 3, func(c *Config) {
		c.CommitInterval = time.Hour // the lock table is never committed: restart replays the raft log
		if logs[c.ID] == nil {
			logs[c.ID] = newReleaseLog()
		}
		c.Observer = logs[c.ID].observe
	})
	leader(t, tc)
	ctx := ctxT(t, 20*time.Second)
	held := map[string]*Hold{}
	var maxToken uint64
	for i := 0; i < 12; i++ {
		name := fmt.Sprintf("res/%d", i)
		n := tc.Member(uint64(i%3 + 1))
		h, err := n.Acquire(ctx, name, fmt.Sprintf("o%d", i), true, 0)
		require.NoError(t, err)
		maxToken = max(maxToken, h.Token())
		if i%2 == 0 {
			require.NoError(t, h.Release(ctx))
		} else {
			held[name] = h
		}
	}
	for id := range tc.All() {
		tc.Crash(id)
	}
	for id := uint64(1); id <= 3; id++ {
		logs[id] = newReleaseLog()
		require.NoError(t, tc.Restart(id))
	}
	leader(t, tc)
	// Each restarted node closes its earlier session: the held locks come
	// back as releases with their original tokens.
	require.Eventually(t, func() bool {
		for _, lg := range logs {
			if len(lg.snapshot()) < len(held) {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	for id, lg := range logs {
		released := lg.snapshot()
		for name, h := range held {
			ev, ok := released[name]
			require.True(t, ok, "node %d: acknowledged grant of %s lost", id, name)
			require.Equal(t, h.Token(), ev.Token, "node %d: %s", id, name)
			require.Equal(t, lockfsm.ReasonSessionClosed, ev.Reason)
		}
		for name := range released {
			_, ok := held[name]
			require.True(t, ok, "node %d: %s was released before the crash but held after it", id, name)
		}
	}
	for i := 0; i < 12; i++ {
		h, err := tc.Member(uint64(i%3+1)).Acquire(ctx, fmt.Sprintf("res/%d", i), "after", false, 0)
		require.NoError(t, err)
		require.Greater(t, h.Token(), maxToken, "tokens keep increasing across a full restart")
	}
	requireSameTables(t, tc)
}

// requireSameTables checks S7: every replica's lock table is byte-identical
// once they have applied the same index.
func requireSameTables(t *testing.T, tc *cluster.Cluster[*Node]) {
	t.Helper()
	require.Eventually(t, func() bool {
		var first []byte
		var firstIdx uint64
		for _, n := range tc.All() {
			b, idx, err := n.TableSnapshot(context.Background())
			require.NoError(t, err)
			if first == nil {
				first, firstIdx = b, idx
				continue
			}
			if idx != firstIdx || !bytes.Equal(b, first) {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "replicas' lock tables differ")
}

// snapshotOften has a node snapshot every 50 entries and keep 10 before it.
func snapshotOften(c *Config) {
	c.SnapshotEvery = 50
	c.CompactKeep = 10
}

// leaveBehind crashes a follower of tc (which snapshots often) and has the
// leader take and release 150 locks meanwhile, keeping every tenth held so
// the snapshot is not empty. It returns the follower, still down, the
// leader and the holds it kept.
func leaveBehind(t *testing.T, ctx context.Context, tc *cluster.Cluster[*Node]) (f uint64, lead *Node, holds []*Hold) {
	t.Helper()
	f = follower(t, tc)
	tc.Crash(f)
	lead = tc.Member(leader(t, tc))
	for i := 0; i < 150; i++ {
		name := fmt.Sprintf("k/%d", i%20)
		if i%10 == 0 {
			name = fmt.Sprintf("held/%d", i)
		}
		h, err := lead.Acquire(ctx, name, fmt.Sprintf("o%d", i), true, 0)
		require.NoError(t, err)
		if i%10 == 0 {
			holds = append(holds, h)
			continue
		}
		require.NoError(t, h.Release(ctx))
	}
	return f, lead, holds
}

// TestFollowerCatchesUpBySnapshot: a follower is down while the others
// apply enough entries to snapshot and compact their logs; when it comes
// back it is sent a snapshot (streamed by the transport), restores its lock
// table from it, and ends byte-identical to the others.
func TestFollowerCatchesUpBySnapshot(t *testing.T) {
	tc := newCluster(t, 3, snapshotOften)
	ctx := ctxT(t, 30*time.Second)
	f, _, holds := leaveBehind(t, ctx, tc)
	require.NoError(t, tc.Restart(f))
	require.Eventually(t, func() bool {
		st, err := tc.Member(f).Status(ctx)
		return err == nil && st.SnapshotsRestored > 0
	}, 15*time.Second, 20*time.Millisecond, "the follower was not sent a snapshot")
	requireSameTables(t, tc)
	// And it serves locks afterwards.
	h, err := tc.Member(f).Acquire(ctx, "after-snapshot", "f", true, 0)
	require.NoError(t, err)
	require.NoError(t, h.Release(ctx))
	for _, h := range holds {
		require.NoError(t, h.Release(ctx))
	}
}

// TestLeaderFailover: the leader dies without cleanup; the others elect a
// new one and Lock works again. The time from the crash to the next
// successful Lock is reported.
func TestLeaderFailover(t *testing.T) {
	tc := newCluster(t, 3)
	lead := leader(t, tc)
	ctx := ctxT(t, 30*time.Second)
	var survivor *Node
	for id, n := range tc.All() {
		if id != lead {
			survivor = n
		}
	}
	h, err := survivor.Acquire(ctx, "before", "s", true, 0)
	require.NoError(t, err)
	start := time.Now()
	tc.Crash(lead)
	h2, err := survivor.Acquire(ctx, "after", "s", true, 0)
	require.NoError(t, err)
	took := time.Since(start)
	el := configOf(tc, 1).electionTimeout()
	t.Logf("crash → next Lock granted: %v (election timeout %v)", took, el)
	require.NotEqual(t, lead, leader(t, tc))
	require.NoError(t, h2.Release(ctx))
	// The hold taken before the failover survived it.
	require.NoError(t, h.Context().Err())
	require.NoError(t, h.Release(ctx))
}

// TestCloseReleasesEverything: a graceful Close releases the node's locks
// and removes its waiters in one entry; a waiter elsewhere is granted.
func TestCloseReleasesEverything(t *testing.T) {
	tc := newCluster(t, 3)
	leader(t, tc)
	ctx := ctxT(t, 20*time.Second)
	a, b := tc.Member(1), tc.Member(2)
	ha, err := a.Acquire(ctx, "x", "a", true, 0)
	require.NoError(t, err)
	_, err = a.Acquire(ctx, "y", "a", true, 0)
	require.NoError(t, err)
	got := make(chan *Hold, 1)
	go func() {
		h, err := b.Acquire(ctx, "x", "b", true, 0)
		if err == nil {
			got <- h
		}
	}()
	requireWaiters(t, b, "x", 1)
	start := time.Now()
	require.NoError(t, a.Close(ctx))
	tc.Stopped(1)
	select {
	case h := <-got:
		t.Logf("graceful close → next grant: %v", time.Since(start))
		require.Greater(t, h.Token(), ha.Token())
	case <-ctx.Done():
		t.Fatal("waiter not granted after Close")
	}
	require.ErrorIs(t, context.Cause(ha.Context()), lockerr.ErrClosed)
	_, err = a.Acquire(ctx, "z", "a", true, 0)
	require.ErrorIs(t, err, lockerr.ErrClosed)
	require.NoError(t, a.Close(ctx), "Close is idempotent")
}

// TestDiskFailureStopsServing: when a node's raft log write fails, it stops
// serving (its calls fail with lockerr.ErrStorage, its handles end) instead of
// acknowledging anything it could not make durable; the rest of the cluster
// carries on.
func TestDiskFailureStopsServing(t *testing.T) {
	tc := newCluster(t, 3)
	lead := leader(t, tc)
	a := otherThan(tc, lead)
	ctx := ctxT(t, 20*time.Second)
	h, err := tc.Member(a).Acquire(ctx, "disk", "a", true, 0)
	require.NoError(t, err)
	tc.Faults(a).FailWrites(errors.New("injected: no space left on device"))
	_, err = tc.Member(a).Acquire(ctx, "other", "a", true, 0)
	require.ErrorIs(t, err, lockerr.ErrStorage)
	require.ErrorIs(t, context.Cause(h.Context()), lockerr.ErrStorage)
	_, err = tc.Member(a).Acquire(ctx, "again", "a", true, 0)
	require.ErrorIs(t, err, lockerr.ErrStorage, "a failed node keeps refusing")
	// The others still serve, and a's lock moves on once its session expires.
	b := otherThan(tc, lead, a)
	h2, err := tc.Member(b).Acquire(ctx, "disk", "b", true, 0)
	require.NoError(t, err)
	require.Greater(t, h2.Token(), h.Token())
}
