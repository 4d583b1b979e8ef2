package lockraft_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft"
	"github.com/lockraft/lockraft/internal/nettest"
	"github.com/lockraft/lockraft/node"
)

// freeAddr is an address on loopback for a member started later in the test
// (nettest.FreeAddr: no other listener or connection can take it meanwhile).
func freeAddr(t *testing.T) string {
	t.Helper()
	return nettest.FreeAddr(t)
}

func fast() lockraft.Option {
	return lockraft.Combine(lockraft.WithTimings(20*time.Millisecond, 10), lockraft.WithSessionTTL(2*time.Second),
		lockraft.WithTuning(lockraft.Tuning{KeepaliveInterval: 100 * time.Millisecond}))
}

// joinOne starts a single-member cluster through the public API.
// lockInTurn has every node take and release name, one after the other:
// each is granted, with a token above the previous one's.
func lockInTurn(ctx context.Context, t *testing.T, nodes []*lockraft.Node, name string) {
	t.Helper()
	var last uint64
	for _, n := range nodes {
		l, err := n.Lock(ctx, name)
		require.NoError(t, err)
		require.Greater(t, l.Token(), last)
		last = l.Token()
		require.NoError(t, l.Unlock(ctx))
	}
}

func joinOne(t *testing.T, dir string) *lockraft.Node {
	t.Helper()
	addr := freeAddr(t)
	n, err := lockraft.Join([]string{addr}, lockraft.WithDataDir(dir), lockraft.WithListenAddr(addr), fast())
	require.NoError(t, err)
	t.Cleanup(func() { n.Close(context.Background()) })
	return n
}

func TestBadNamesAndOwners(t *testing.T) {
	n := joinOne(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range []string{"", strings.Repeat("x", 513), "bad\xffutf8"} {
		_, err := n.Lock(ctx, name)
		require.ErrorIs(t, err, lockraft.ErrInvalidName, "%q", name)
		_, err = n.TryLock(ctx, name)
		require.ErrorIs(t, err, lockraft.ErrInvalidName, "%q", name)
	}
	_, err := n.Lock(ctx, "ok", lockraft.WithOwner(strings.Repeat("o", 257)))
	require.ErrorIs(t, err, lockraft.ErrInvalidOwner)
	l, err := n.Lock(ctx, strings.Repeat("x", 512))
	require.NoError(t, err, "a 512-byte name is allowed")
	require.NoError(t, l.Unlock(ctx))
}

func TestUnlockTwiceAndReentrancy(t *testing.T) {
	n := joinOne(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l1, err := n.Lock(ctx, "inv/42", lockraft.WithOwner("run-7"))
	require.NoError(t, err)
	l2, err := n.Lock(ctx, "inv/42", lockraft.WithOwner("run-7"))
	require.NoError(t, err)
	require.Equal(t, l1.Token(), l2.Token())
	_, err = n.TryLock(ctx, "inv/42")
	require.ErrorIs(t, err, lockraft.ErrLocked)
	require.True(t, lockraft.IsRetryable(err))
	require.NoError(t, l2.Unlock(ctx))
	require.ErrorIs(t, l2.Unlock(ctx), lockraft.ErrNotHeld, "Unlock twice")
	require.ErrorIs(t, context.Cause(l2.Context()), lockraft.ErrReleased)
	require.NoError(t, l1.Context().Err(), "the outer hold is still held")
	_, err = n.TryLock(ctx, "inv/42")
	require.ErrorIs(t, err, lockraft.ErrLocked, "one Unlock of two leaves it held")
	require.NoError(t, l1.Unlock(ctx))
	l3, err := n.TryLock(ctx, "inv/42")
	require.NoError(t, err)
	require.Greater(t, l3.Token(), l1.Token())

	_, err = n.Lock(ctx, "deep", lockraft.WithOwner("o"))
	require.NoError(t, err)
	for i := 1; i < node.DefaultMaxHolds; i++ {
		_, err = n.Lock(ctx, "deep", lockraft.WithOwner("o"))
		require.NoError(t, err)
	}
	_, err = n.Lock(ctx, "deep", lockraft.WithOwner("o"))
	require.ErrorIs(t, err, lockraft.ErrTooManyHolds)
}

func TestCallsAfterClose(t *testing.T) {
	n := joinOne(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := n.Lock(ctx, "a")
	require.NoError(t, err)
	require.NoError(t, n.Close(ctx))
	require.ErrorIs(t, context.Cause(l.Context()), lockraft.ErrClosed, "Close ends the handles")
	_, err = n.Lock(ctx, "b")
	require.ErrorIs(t, err, lockraft.ErrClosed)
	_, err = n.TryLock(ctx, "b")
	require.ErrorIs(t, err, lockraft.ErrClosed)
	require.Error(t, l.Unlock(ctx))
	require.NoError(t, n.Close(ctx), "Close twice")
}

func TestInvalidOptions(t *testing.T) {
	addr := freeAddr(t)
	cases := map[string][]lockraft.Option{
		"no data dir":         {lockraft.WithListenAddr(addr)},
		"not among peers":     {lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr("127.0.0.1:1")},
		"short session ttl":   {lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr(addr), lockraft.WithSessionTTL(time.Second)},
		"negative lock delay": {lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr(addr), lockraft.WithLockDelay(-time.Second)},
		"bad timings":         {lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr(addr), lockraft.WithTimings(time.Nanosecond, 10)},
		"election <= heartbeat": {lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr(addr),
			lockraft.WithTimings(100*time.Millisecond, 1)},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := lockraft.Join([]string{addr}, opts...)
			require.ErrorIs(t, err, lockraft.ErrInvalidConfig)
		})
	}
	t.Run("negative lease", func(t *testing.T) {
		n := joinOne(t, t.TempDir())
		_, err := n.Lock(context.Background(), "x", lockraft.WithLease(-time.Second))
		require.ErrorIs(t, err, lockraft.ErrInvalidConfig)
	})
}

// TestMinSessionTTL: MinSessionTTL is the floor Join enforces, with the
// default timings (5.4 s) and with short ones: a tick below it is refused,
// it is accepted.
func TestMinSessionTTL(t *testing.T) {
	require.Equal(t, 5400*time.Millisecond, lockraft.MinSessionTTL(time.Second))
	tick, election := 20*time.Millisecond, 200*time.Millisecond
	floor := lockraft.MinSessionTTL(election)
	addr := freeAddr(t)
	join := func(ttl time.Duration) (*lockraft.Node, error) {
		return lockraft.Join([]string{addr}, lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr(addr),
			lockraft.WithTimings(tick, 10), lockraft.WithSessionTTL(ttl))
	}
	_, err := join(floor - tick)
	require.ErrorIs(t, err, lockraft.ErrInvalidConfig, "a tick below MinSessionTTL")
	n, err := join(floor)
	require.NoError(t, err, "MinSessionTTL itself")
	require.NoError(t, n.Close(context.Background()))
}

// TestDataDirChecks: a directory of another node, one locked by a running
// node, and a corrupt lock table are refused with ErrDataDir naming why.
func TestDataDirChecks(t *testing.T) {
	dir := t.TempDir()
	n := joinOne(t, dir)
	addr := freeAddr(t)
	_, err := lockraft.Join([]string{addr}, lockraft.WithDataDir(dir), lockraft.WithListenAddr(addr), fast())
	require.ErrorIs(t, err, lockraft.ErrDataDir, "directory in use by a running node")
	require.NoError(t, n.Close(context.Background()))

	// Same directory, a different node id.
	a2, b2 := freeAddr(t), freeAddr(t)
	_, err = lockraft.Join([]string{a2, b2}, lockraft.WithDataDir(dir), lockraft.WithListenAddr(b2), fast())
	require.ErrorIs(t, err, lockraft.ErrDataDir)
	require.Contains(t, err.Error(), "belongs to node 0000000000000001")

	// Same id, another cluster.
	_, err = lockraft.Join([]string{a2}, lockraft.WithDataDir(dir), lockraft.WithListenAddr(a2),
		lockraft.WithClusterID("other"), fast())
	require.ErrorIs(t, err, lockraft.ErrDataDir)
	require.Contains(t, err.Error(), "cluster")

	// A corrupt lock table.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "locks.db"), []byte(strings.Repeat("garbage", 1000)), 0o600))
	_, err = lockraft.Join([]string{a2}, lockraft.WithDataDir(dir), lockraft.WithListenAddr(a2), fast())
	require.ErrorIs(t, err, lockraft.ErrDataDir)
	require.Contains(t, err.Error(), "locks.db")
}

func TestRestartSingleNodeKeepsTokensIncreasing(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	join := func() *lockraft.Node {
		n, err := lockraft.Join([]string{addr}, lockraft.WithDataDir(dir), lockraft.WithListenAddr(addr), fast())
		require.NoError(t, err)
		return n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := join()
	l, err := n.Lock(ctx, "a")
	require.NoError(t, err)
	first := l.Token()
	require.NoError(t, n.Close(ctx))
	n = join()
	defer n.Close(ctx)
	l, err = n.Lock(ctx, "a")
	require.NoError(t, err, "Close released the lock; a restart must not resurrect it")
	require.Greater(t, l.Token(), first)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("timed out")
	}
}
