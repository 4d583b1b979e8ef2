package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/cluster"
	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/node/internal/fleet"
)

// formations watches a fleet and records every formation id any of its
// nodes ever held, and every node that stopped serving.
type formations struct {
	mu      sync.Mutex
	ids     map[string][]string // formation id -> instance names that held it
	stopped map[string]error
	done    chan struct{}
	wg      sync.WaitGroup
}

func watchFormations(t *testing.T, fleets ...*cluster.Cluster[*Node]) *formations {
	w := &formations{ids: map[string][]string{}, stopped: map[string]error{}, done: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
			for _, f := range fleets {
				for _, n := range f.All() {
					id, err := n.formation(), n.err()
					w.mu.Lock()
					if id != "" && !slices.Contains(w.ids[id], n.gossipName()) {
						w.ids[id] = append(w.ids[id], n.gossipName())
					}
					if err != nil && w.stopped[n.gossipName()] == nil {
						w.stopped[n.gossipName()] = err
					}
					w.mu.Unlock()
				}
			}
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *formations) stop() {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	w.wg.Wait()
}

func (w *formations) snapshot() (map[string][]string, map[string]error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := map[string][]string{}
	for k, v := range w.ids {
		ids[k] = slices.Clone(v)
	}
	stopped := map[string]error{}
	for k, v := range w.stopped {
		stopped[k] = v
	}
	return ids, stopped
}

// TestS1IslandsFormOneCluster (S1, design §5 "Forming"): a fleet of 6 with 3
// founders starts as two islands of 3 (each member's seeds are in its own
// island, so gossip never connects them until the test heals it). With a
// count rule both islands see 3 members and each forms a cluster with the
// same ClusterID, granting the same names. Here at most one cluster forms
// during the partition: the one holding every founder, or none when the
// founders are split; after healing there is exactly one cluster with all
// 6 members in it (5 voters and a learner by the default policy), every
// member serves locks, and nobody was told it was removed.
func TestS1IslandsFormOneCluster(t *testing.T) {
	for _, tc := range []struct {
		name         string
		islandA      []uint64
		islandB      []uint64
		formsDuring  bool // founders 1, 2, 3 all in one island
		partitionFor time.Duration
	}{
		{"founders in one island", []uint64{1, 2, 3}, []uint64{4, 5, 6}, true, 0},
		{"founders split 2|1", []uint64{1, 4, 3}, []uint64{2, 5, 6}, false, 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newGossipCluster(t, "islands", 6, 3)
			w := watchFormations(t, f)
			startIsland := func(members []uint64) {
				seed := ""
				for _, i := range members {
					if seed == "" {
						seed = startSlot(t, f, i).GossipAddr()
						continue
					}
					startSlot(t, f, i, seed)
				}
			}
			startIsland(tc.islandA)
			startIsland(tc.islandB)
			if tc.formsDuring {
				waitConf(t, f, 30*time.Second, "island A formed", func(v, l []uint64) bool { return len(v) == 3 })
				// Island B sees three members too, for well over the settle
				// time, and must stay out of raft.
				never(t, func() bool {
					for _, i := range tc.islandB {
						if f.Member(i).storage.HasState() || f.Member(i).formation() != "" {
							return true
						}
					}
					return false
				}, 3*time.Second, 20*time.Millisecond, "the island without founders formed a cluster")
			} else {
				require.Never(t, func() bool {
					ids, _ := w.snapshot()
					return len(ids) > 0
				}, tc.partitionFor, 20*time.Millisecond, "a cluster formed without all founders")
			}
			ids, stopped := w.snapshot()
			require.LessOrEqual(t, len(ids), 1, "two formations during the partition: %v", ids)
			require.Empty(t, stopped)

			// Heal: island B's members learn island A's.
			_, err := f.Member(tc.islandB[0]).ml.Join([]string{f.Member(tc.islandA[0]).GossipAddr()})
			require.NoError(t, err)
			all := map[uint64]bool{}
			for _, n := range f.All() {
				all[n.ID()] = true
			}
			voters, learners := waitConf(t, f, 120*time.Second, "one cluster with all 6", func(v, l []uint64) bool {
				return len(v) == 5 && len(l) == 1
			})
			for _, id := range append(slices.Clone(voters), learners...) {
				require.True(t, all[id], "member %x is one of the fleet", id)
			}
			lead := fleetLeader(t, f, 5*time.Second)
			ids, stopped = w.snapshot()
			require.Len(t, ids, 1, "exactly one formation: %v", ids)
			require.Empty(t, stopped, "nobody was stopped (told removed)")
			for _, n := range f.All() {
				// A learner just added adopts the id with its first raft traffic.
				require.Eventually(t, func() bool { return n.formation() == lead.formation() }, 20*time.Second, 10*time.Millisecond,
					"%s belongs to the one cluster", n.gossipName())
			}
			ctx := ctxT(t, 60*time.Second)
			for _, n := range f.All() {
				lockUnlock(t, ctx, n, "one-cluster")
			}
			t.Logf("one cluster %s: voters %x learners %x", lead.formation(), voters, learners)
		})
	}
}

// TestS1FormedClustersWithOneIDNeverMerge (S1): two clusters formed apart
// with the same ClusterID (two founding sets, by configuration) whose
// gossip then meets. Each sees the other's members alive and with raft
// data; without formation ids each leader took them for its own removed
// members and told them so, stopping them for good. Here neither cluster
// adds, removes or tells anyone anything, no raft message crosses, and both
// keep serving.
func TestS1FormedClustersWithOneIDNeverMerge(t *testing.T) {
	a := newGossipCluster(t, "twin", 3, 3, prefixed("a"))
	b := newGossipCluster(t, "twin", 3, 3, prefixed("b"))
	w := watchFormations(t, a, b)
	for _, f := range []*cluster.Cluster[*Node]{a, b} {
		startSeeded(t, f, 3)
	}
	va, _ := waitConf(t, a, 30*time.Second, "a formed", func(v, l []uint64) bool { return len(v) == 3 })
	vb, _ := waitConf(t, b, 30*time.Second, "b formed", func(v, l []uint64) bool { return len(v) == 3 })
	ids, _ := w.snapshot()
	require.Len(t, ids, 2)

	_, err := b.Member(1).ml.Join([]string{a.Member(1).GossipAddr()})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, f := range []*cluster.Cluster[*Node]{a, b} {
			for _, n := range f.All() {
				if len(n.Members()) != 6 {
					return false
				}
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "gossip merged: everyone sees all six")
	// Several reconcile rounds (every 100 ms) with the other cluster in
	// view: nothing may change.
	require.Never(t, func() bool {
		_, stopped := w.snapshot()
		return len(stopped) > 0
	}, 3*time.Second, 20*time.Millisecond, "a member was stopped")
	va2, la := waitConf(t, a, time.Second, "a unchanged", func(v, l []uint64) bool { return true })
	vb2, lb := waitConf(t, b, time.Second, "b unchanged", func(v, l []uint64) bool { return true })
	require.Equal(t, va, va2)
	require.Equal(t, vb, vb2)
	require.Empty(t, la)
	require.Empty(t, lb)
	ids2, _ := w.snapshot()
	require.Equal(t, ids, ids2, "formation ids unchanged")
	ctx := ctxT(t, 60*time.Second)
	for _, f := range []*cluster.Cluster[*Node]{a, b} {
		for _, n := range f.All() {
			lockUnlock(t, ctx, n, "twin")
		}
	}
}

// prefixed names a fleet's slots "<prefix>-<i>" rather than after its
// ClusterID, its founders too: two founding sets with one ClusterID.
func prefixed(prefix string) func(*Config) {
	rename := func(name string) string { return prefix + name[strings.LastIndex(name, "-"):] }
	return func(c *Config) {
		c.Gossip.Name = rename(c.Gossip.Name)
		for i, f := range c.Gossip.Founders {
			c.Gossip.Founders[i] = rename(f)
		}
	}
}

// lockUnlock locks name on n and unlocks it. A fleet just formed or grown
// may still be settling its sessions (on a starved machine a session opened
// before the cluster could keep it alive may expire once): a Lock that
// fails with lockerr.ErrSessionExpired or lockerr.ErrUnavailable, both of which leave
// nothing held, is tried again until ctx ends.
func lockUnlock(t *testing.T, ctx context.Context, n *Node, name string) {
	t.Helper()
	settling := func(err error) bool {
		return (errors.Is(err, lockerr.ErrSessionExpired) || errors.Is(err, lockerr.ErrUnavailable) || errors.Is(err, lockerr.ErrNotHeld)) && ctx.Err() == nil
	}
	for {
		h, err := n.Acquire(ctx, name, n.gossipName(), true, 0)
		if settling(err) {
			continue
		}
		require.NoError(t, err, n.gossipName())
		if err := h.Release(ctx); settling(err) {
			continue // the session expired under the hold: the lock was lost, not leaked
		} else {
			require.NoError(t, err, n.gossipName())
		}
		return
	}
}

// TestFormationAnswersAreDurable (S1): a founder's answer to the candidate
// outlives a restart, and each refusal names its reason: another formation
// already adopted, a founders list that differs, a question meant for
// another node, and raft data.
func TestFormationAnswersAreDurable(t *testing.T) {
	f := newGossipCluster(t, "answers", 3, 3)
	n := startSlot(t, f, 2) // a founder, alone: nobody forms
	ask := func(n *Node, r fleet.FormRequest) fleet.FormReply {
		t.Helper()
		return n.fleet.Answer(99, r)
	}
	founders := []string{"answers-1", "answers-2", "answers-3"}
	idA, idB := strings.Repeat("a", 32), strings.Repeat("b", 32)
	req := fleet.FormRequest{Formation: idA, Candidate: "answers-1", Founders: founders, Target: "answers-2", TargetID: n.ID()}

	rep := ask(n, fleet.FormRequest{Formation: idA, Candidate: "answers-1", Founders: founders[:2], Target: "answers-2", TargetID: n.ID()})
	require.False(t, rep.Adopted)
	require.Contains(t, rep.Reason, "founders differ")
	rep = ask(n, fleet.FormRequest{Formation: idA, Candidate: "answers-1", Founders: founders, Target: "answers-2", TargetID: n.ID() + 1})
	require.False(t, rep.Adopted)
	require.Contains(t, rep.Reason, "asked answers-2")
	require.Empty(t, n.formation(), "a refusal adopts nothing")

	rep = ask(n, req)
	require.True(t, rep.Adopted)
	require.Equal(t, "answers-2", rep.Name)
	require.Equal(t, n.ID(), rep.ID)
	require.True(t, ask(n, req).Adopted, "asking again gets the same answer")
	req.Formation = idB
	rep = ask(n, req)
	require.False(t, rep.Adopted)
	require.Contains(t, rep.Reason, "belongs to formation "+idA)

	// The answer is in the data directory: after a restart it still holds.
	id := n.ID()
	f.Crash(2)
	n = startSlot(t, f, 2)
	require.Equal(t, id, n.ID())
	require.Equal(t, idA, n.formation())
	rep = ask(n, req)
	require.False(t, rep.Adopted, "a restart does not free the answer")
	ident, ok, err := readIdentity(f.Dir(2))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, idA, ident.formation)
}

// TestFormationConfigErrors (design §6): gossip without founders, or with a
// count that contradicts them, is refused with lockerr.ErrInvalidConfig naming the
// field; the development mode (BootstrapExpect 1) needs none.
func TestFormationConfigErrors(t *testing.T) {
	base := func(g GossipConfig) Config {
		return Config{DataDir: t.TempDir(), Gossip: &g}
	}
	for name, tc := range map[string]struct {
		g    GossipConfig
		want string // "" = valid
	}{
		"no founders":            {GossipConfig{}, "Gossip.Founders is required"},
		"expect 3, no founders":  {GossipConfig{BootstrapExpect: 3}, "Gossip.Founders is required"},
		"expect contradicts":     {GossipConfig{BootstrapExpect: 3, Founders: []string{"a", "b"}}, "BootstrapExpect is 3 but 2 Founders"},
		"founder twice":          {GossipConfig{Founders: []string{"a", "b", "a"}}, `"a" is listed twice`},
		"empty founder name":     {GossipConfig{Founders: []string{"a", ""}}, "a name is empty"},
		"development mode":       {GossipConfig{BootstrapExpect: 1}, ""},
		"founders, expect unset": {GossipConfig{Founders: []string{"a", "b", "c"}}, ""},
		"founders and expect":    {GossipConfig{Founders: []string{"a", "b", "c"}, BootstrapExpect: 3}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			err := base(tc.g).Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, lockerr.ErrInvalidConfig)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestGossipDevelopmentModeForms (L1): BootstrapExpect 1 without Founders
// is the single-node development mode: the node forms a cluster of its own
// and serves locks.
func TestGossipDevelopmentModeForms(t *testing.T) {
	cfg := Config{DataDir: t.TempDir(), ClusterID: "dev", Logger: testLogger(t, 1),
		Gossip: &GossipConfig{BootstrapExpect: 1, Timing: membership.FastTiming()}}
	fastConfig(&cfg)
	n, err := Start(cfg)
	require.NoError(t, err)
	t.Cleanup(n.Crash)
	ctx := ctxT(t, 20*time.Second)
	h, err := n.Acquire(ctx, "dev", "me", true, 0)
	require.NoError(t, err)
	require.NoError(t, h.Release(ctx))
	require.NotEmpty(t, n.formation())
	require.Equal(t, fmt.Sprintf("lockraft-%016x", n.ID()), n.gossipName())
}

// TestS1LightMembersBindToTheirCluster (S1): a light member (outside the
// raft configuration, forwarding to the leader) adopts the formation id of
// the leader that opened its session, so from then on its calls carry it
// and another formed cluster with the same ClusterID refuses them, as a
// learner is bound by its first raft traffic.
func TestS1LightMembersBindToTheirCluster(t *testing.T) {
	f, lights := lightFleet(t, "bind", 6, nil)
	require.NotEmpty(t, lights)
	lead := fleetLeader(t, f, 5*time.Second)
	require.NotEmpty(t, lead.formation())
	for _, n := range lights {
		require.Eventually(t, func() bool { return n.formation() == lead.formation() }, 10*time.Second, 10*time.Millisecond,
			"light member %s never bound to the cluster", n.gossipName())
		require.Equal(t, lead.formation(), n.tr.Formation(), "the transport carries it")
		ident, ok, err := readIdentity(n.cfg.DataDir)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, lead.formation(), ident.formation, "and it is in the data directory")
	}
}
