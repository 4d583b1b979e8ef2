package node

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node/internal/fleet"
	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// TestVersionGateDuringRollingUpgrade (S7 in a mixed-version cluster): while
// a member of the configuration runs a version without the catalogue (it
// tells an old version, or none at all, as versions before the header do),
// catalogue requests are refused with lockerr.ErrOlderMembers on the leader and on
// followers, and nothing is proposed; the mutex works as before; a
// catalogue entry a follower forwards anyway is dropped by the leader. Once
// the old member is upgraded (restarted as this version) the catalogue
// opens.
func TestVersionGateDuringRollingUpgrade(t *testing.T) {
	for _, claim := range []string{"lockraft/0.1", "-"} {
		t.Run(claim, func(t *testing.T) {
			old := uint64(3)
			upgraded := false
			tc := newCluster(t, 3, func(c *Config) {
				if c.ID == old && !upgraded {
					knobsOfConfig(c).ClaimVersion = claim
				}
			})
			lead := leader(t, tc)
			if lead == old {
				// Let another member lead: the old one's own gate does not
				// count itself, and an old leader would not gate at all.
				require.NoError(t, tc.Member(old).do(context.Background(), func() {
					done := make(chan struct{})
					tc.Member(old).transferLeadership(done)
				}))
				require.Eventually(t, func() bool { l := leader(t, tc); return l != old }, 10*time.Second, 10*time.Millisecond)
				lead = leader(t, tc)
			}
			follower := otherThan(tc, lead, old)
			ctx := ctxT(t, 20*time.Second)
			// The mutex is not gated.
			h, err := tc.Member(follower).Acquire(ctx, "m", "o", false, 0)
			require.NoError(t, err)
			require.NoError(t, h.Release(ctx))
			require.Eventually(t, func() bool { return applied(t, tc.Member(lead)) == applied(t, tc.Member(follower)) },
				5*time.Second, 5*time.Millisecond)
			before := map[uint64]uint64{lead: proposed(t, tc.Member(lead)), follower: proposed(t, tc.Member(follower))}
			for _, id := range []uint64{lead, follower} {
				for _, r := range []Request{rwReq("g", "o", true, true), semReq("g", "o", 1, 2, true),
					campaignReq("g", "o", "v"), multiReq("o", true, "g", "h")} {
					_, err := tc.Member(id).AcquireWith(ctx, r)
					require.ErrorIs(t, err, lockerr.ErrOlderMembers, "node %d, %+v", id, r)
				}
				require.Equal(t, before[id], proposed(t, tc.Member(id)), "node %d proposed nothing", id)
			}

			// A light member's forwarded catalogue command: answered with
			// lockerr.ErrOlderMembers, not proposed.
			// (The command is the follower's own, as the leader's
			// authorisation requires of a forwarder.)
			reply := make(chan *transportpb.FwdProposeResponse, 1)
			fsess := tc.Member(follower).sess.Load()
			lc := lockfsm.Command{Kind: lockfsm.KindAcquire, Session: fsess, Seq: 1 << 40, Name: "light", Owner: "o",
				Primitive: lockfsm.PrimSemaphore, Permits: 1, Limit: 2}
			ln := tc.Member(lead)
			ferr := make(chan error, 1)
			require.NoError(t, ln.do(ctx, func() { ferr <- ln.fwdProposeOnLeader(follower, [][]byte{lc.AppendEncode(nil)}, reply) }))
			require.NoError(t, <-ferr)
			resp := <-reply
			require.Nil(t, resp.GetNotLeader())
			require.Len(t, resp.GetItems(), 1)
			_, res := pushedResult(resp.GetItems()[0].GetResult())
			require.ErrorIs(t, res.Err, lockerr.ErrOlderMembers)
			// A barrier: a mutex taken and released through the leader is
			// applied after anything the leader proposed before it.
			bh, err := ln.Acquire(ctx, "barrier", "o", false, 0)
			require.NoError(t, err)
			require.NoError(t, bh.Release(ctx))
			_, lightFound := lockFound(ln, "light")
			require.False(t, lightFound, "nothing proposed for the light member")

			// A follower that proposes a catalogue entry anyway: the leader
			// drops it. The mutex acquire proposed after it is applied, the
			// catalogue one before it is not.
			f := tc.Member(follower)
			require.NoError(t, f.do(ctx, func() {
				c := lockfsm.Command{Kind: lockfsm.KindAcquire, Session: f.loop.own.id, Seq: 1 << 40, Name: "sneak",
					Owner: "o", Primitive: lockfsm.PrimRW, Mode: lockfsm.ModeShared}
				f.loop.props.add(c.AppendEncode(nil), nil)
			}))
			h, err = f.Acquire(ctx, "after-sneak", "o", false, 0)
			require.NoError(t, err)
			_, found := lockFound(f, "sneak")
			require.False(t, found, "the leader proposed a catalogue entry while a member is older")

			// The old member is upgraded: restarted as this version.
			tc.Crash(old)
			upgraded = true
			require.NoError(t, tc.Restart(old))
			require.Eventually(t, func() bool {
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				h, err := tc.Member(follower).AcquireWith(cctx, rwReq("g", "o", true, false))
				if err != nil {
					t.Logf("after the upgrade: %v", err)
					return false
				}
				return h.Release(cctx) == nil
			}, 10*time.Second, 50*time.Millisecond, "the catalogue opens once every member runs it")
		})
	}
}

// TestForwardedNewerEntryNotProposed (S7): an entry of a newer format than
// the leader knows, forwarded by a light member or by a follower (a member
// of a newer version, or a broken one), is never proposed: proposed, it
// would stop every replica of this version at it (lockerr.ErrNewerVersion). The
// cluster keeps serving.
func TestForwardedNewerEntryNotProposed(t *testing.T) {
	tc := newCluster(t, 3)
	lead := leader(t, tc)
	f := follower(t, tc)
	ctx := ctxT(t, 20*time.Second)
	newer := []byte{9, 5, 0} // a well-formed envelope of format version 9
	ln := tc.Member(lead)
	reply := make(chan *transportpb.FwdProposeResponse, 1)
	ferr := make(chan error, 1)
	require.NoError(t, ln.do(ctx, func() { ferr <- ln.fwdProposeOnLeader(f, [][]byte{newer}, reply) }))
	require.ErrorIs(t, <-ferr, transport.ErrInvalidRequest, "refused as undecodable, whole")
	require.NoError(t, tc.Member(f).do(ctx, func() { tc.Member(f).loop.props.add(newer, nil) }))
	// Entries proposed after them commit and apply on every node: had
	// either been proposed, every node would have stopped at it first.
	h, err := tc.Member(f).Acquire(ctx, "after", "o", false, 0)
	require.NoError(t, err)
	require.NoError(t, h.Release(ctx))
	for id, n := range tc.All() {
		require.NoError(t, n.err(), "node %d stopped", id)
		h, err := n.Acquire(ctx, "still-serving", "o", false, 0)
		require.NoError(t, err, "node %d", id)
		require.NoError(t, h.Release(ctx))
	}
}

// TestCheckpointsWaitForTheGate (S7, L3): KindCheckpoint is a version-2
// command that builds before it stop at, so a leader proposes none while a
// member of the configuration is known to run such a build; otherwise a
// crashed member's silent session is checkpointed.
func TestCheckpointsWaitForTheGate(t *testing.T) {
	var took time.Duration
	for _, claim := range []string{"", "-"} {
		t.Run("claim="+claim, func(t *testing.T) {
			old := uint64(3)
			var mu sync.Mutex
			checkpoints := 0
			tc := newCluster(t, 3, func(c *Config) {
				if c.ID == old {
					knobsOfConfig(c).ClaimVersion = claim
				}
				c.Observer = func(r ApplyRecord) {
					if r.Command.Kind == lockfsm.KindCheckpoint {
						mu.Lock()
						checkpoints++
						mu.Unlock()
					}
				}
			})
			lead := leader(t, tc)
			if lead == old {
				require.NoError(t, tc.Member(old).do(context.Background(), func() {
					tc.Member(old).transferLeadership(make(chan struct{}))
				}))
				require.Eventually(t, func() bool { return leader(t, tc) != old }, 10*time.Second, 10*time.Millisecond)
			}
			// The old member has sent raft traffic: its version (or none) is known.
			ctx := ctxT(t, 20*time.Second)
			h, err := tc.Member(leader(t, tc)).Acquire(ctx, "m", "o", false, 0)
			require.NoError(t, err)
			require.NoError(t, h.Release(ctx))
			count := func() int { mu.Lock(); defer mu.Unlock(); return checkpoints }
			start := time.Now()
			tc.Crash(old) // its session goes silent
			if claim == "" {
				require.Eventually(t, func() bool { return count() > 0 }, 10*time.Second, 10*time.Millisecond,
					"a silent session is checkpointed")
				took = time.Since(start)
				t.Logf("first checkpoint %v after the crash", took)
				// The open gate is recorded: a restarted member proposes
				// checkpoints without waiting to hear from every member
				// (the one crashed here included).
				lead := leader(t, tc)
				require.FileExists(t, filepath.Join(tc.Dir(lead), fleet.GateFile))
				tc.Crash(lead)
				require.NoError(t, tc.Restart(lead))
				require.True(t, tc.Member(lead).fleet.GateOpen(), "the gate is open at once after a restart")
				return
			}
			window := max(3*took, 4*tc.Member(leader(t, tc)).cfg.KeepaliveInterval)
			time.Sleep(window) // an absence: nothing to await
			require.Zero(t, count(), "a checkpoint proposed while a member may be older (%v)", window)
		})
	}
}
