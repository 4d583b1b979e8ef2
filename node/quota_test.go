package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/lockerr"
)

// A member's own Acquire beyond its session's lock quota fails at once with
// ErrQuotaExceeded, on a follower as on the leader: the leader refuses a
// follower's command beyond the quota, and before this check the follower's
// caller waited out its whole context. A reentrant acquire of a name it
// already has is no new name, and a released name frees room.
func TestOwnLockQuotaRefusedAtOnce(t *testing.T) {
	const locks = 2
	tc := newCluster(t, 3, func(c *Config) { c.MaxLocksPerSession = locks })
	lead := leader(t, tc)
	for _, id := range []uint64{otherThan(tc, lead), lead} {
		n := tc.Member(id)
		ctx := ctxT(t, 30*time.Second)
		a, err := n.Acquire(ctx, "quota/a", "o", true, 0)
		require.NoError(t, err)
		b, err := n.Acquire(ctx, "quota/b", "o", true, 0)
		require.NoError(t, err)
		again, err := n.Acquire(ctx, "quota/a", "o", true, 0) // reentrant: not a new name
		require.NoError(t, err)
		require.NoError(t, again.Release(ctx))

		// The caller's context is long: a refusal that waited for it
		// would come only after 20 s.
		cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err = n.Acquire(cctx, "quota/c", "o", true, 0)
		cancel()
		require.ErrorIs(t, err, lockerr.ErrQuotaExceeded, "member %d", id)
		require.False(t, errors.Is(err, context.DeadlineExceeded), "member %d waited out its context", id)

		require.NoError(t, b.Release(ctx))
		c, err := n.Acquire(ctx, "quota/c", "o", true, 0) // room again
		require.NoError(t, err, "member %d", id)
		require.NoError(t, c.Release(ctx))
		require.NoError(t, a.Release(ctx))
	}
}
