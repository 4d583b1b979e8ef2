package lockraft_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft"
	"github.com/lockraft/lockraft/internal/cluster"
	"github.com/lockraft/lockraft/internal/knobs"
	"github.com/lockraft/lockraft/node"
)

// joinCluster starts a static cluster of size members through the public
// API in the harness (internal/cluster): each joins with lockraft.Join on
// the harness's peers (real gRPC on loopback, real files), with fast()
// timings, its faults (c.Faults(id)) planted in its node configuration and
// the options opts make of its Spec. The first initial members start now
// (0: all), the others with c.StartMember. Every running member is closed
// when the test ends.
func joinCluster(t *testing.T, size, initial int, opts ...func(cluster.Spec) lockraft.Option) *cluster.Cluster[*lockraft.Node] {
	t.Helper()
	c, err := cluster.Start(cluster.Options[*lockraft.Node]{Size: size, Initial: initial, Dir: t.TempDir(),
		Start: func(s cluster.Spec) (*lockraft.Node, error) {
			var peers []string
			for _, p := range s.Peers {
				peers = append(peers, p.Addr)
			}
			all := []lockraft.Option{lockraft.WithDataDir(s.Dir), lockraft.WithListener(s.Listener),
				lockraft.WithListenAddr(s.Addr), fast(),
				lockraft.WithNodeConfig(func(cfg *node.Config) { knobs.Plant(cfg, s.Knobs) })}
			for _, o := range opts {
				all = append(all, o(s))
			}
			return lockraft.Join(peers, all...)
		}})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// leader waits until every running member agrees on a running leader and
// returns its id.
func leader(t *testing.T, c *cluster.Cluster[*lockraft.Node]) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lead, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	return lead
}
