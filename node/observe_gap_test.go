package node

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// TestObserveNoSilentGap (Observe; L4: pushed, never polled): a
// light member's observer never misses or repeats a change silently.
//
//  1. Pushes are lost while the election leaves the lock table twice
//     (nobody → Y → nobody): the member catches up from the leader and gets
//     exactly those changes, not the current state in their place.
//  2. Pushes are lost again and a learner crashes, so the light member is
//     promoted to learner and restores a snapshot that covers changes it
//     never got: its observer either goes on with exactly the applied
//     changes or ends with lockerr.ErrObserveLagged; never a fold.
//
// Both times the observation must be exactly what a raft member applied
// (a prefix of it, when it ended with lockerr.ErrObserveLagged).
func TestObserveNoSilentGap(t *testing.T) {
	f, lights, applied := observedLightFleet(t, "obsgap", 6)
	require.NotEmpty(t, lights)
	a := lights[0]
	lead := fleetLeader(t, f, 5*time.Second)
	ctx := ctxT(t, 90*time.Second)
	voter := survivingVoter(t, ctx, f, lead)

	o, err := a.Observe(ctx, "eg")
	require.NoError(t, err)
	ch := make(chan LeaderChange, 1024)
	errc := make(chan error, 1)
	go func() {
		for {
			c, err := o.Next(ctx)
			if err != nil {
				errc <- err
				close(ch)
				return
			}
			ch <- c
		}
	}()
	first := nextChange(t, ch)
	require.False(t, first.leading())
	var seen []LeaderChange
	until := func(value string) {
		t.Helper()
		seen = append(seen, changesUntil(t, ch, func(c LeaderChange) bool { return c.Value == value })...)
	}
	campaign := func(value string) *Hold {
		t.Helper()
		h, err := voter.AcquireWith(ctx, campaignReq("eg", "voter", value))
		require.NoError(t, err)
		return h
	}

	// 0. The leader's answer that its records do not reach back (a current
	// state where changes were asked for) ends the light member's
	// observers with lockerr.ErrObserveLagged; they get no state in its place.
	o0, err := a.Observe(ctx, "eg0")
	require.NoError(t, err)
	first0, err := o0.Next(ctx)
	require.NoError(t, err)
	injected := make(chan bool, 1)
	require.NoError(t, a.do(ctx, func() {
		ob := a.loop.observe.byName["eg0"]
		if ob == nil || !ob.known || ob.chain == 0 || !a.light() {
			injected <- false
			return
		}
		defer func() { injected <- true }()
		a.onObserveReply([]string{"eg0"}, []uint64{ob.chain}, []*transportpb.ObservedElection{{Current: true,
			Chain: ob.chain + 100, Changes: []*transportpb.ElectionState{{Index: ob.chain + 100, Session: 9, Owner: []byte("z"),
				Token: ob.chain + 50, Value: []byte("folded")}}}})
	}))
	require.True(t, <-injected, "the light member observes eg0 with a mark")
	_, err = o0.Next(ctx)
	require.ErrorIs(t, err, lockerr.ErrObserveLagged, "after %v", first0)

	// 1. The election leaves the table twice while pushes are lost.
	x := campaign("x")
	until("x")
	faultsOf(f, a).DropPushes(true)
	require.NoError(t, x.Release(ctx))
	y := campaign("y")
	require.NoError(t, y.Release(ctx))
	faultsOf(f, a).DropPushes(false)
	z := campaign("z")
	until("z")
	require.Equal(t, applied("eg", first.Index), seen, "part 1: the light member observed exactly the applied changes")
	t.Logf("part 1: %d changes observed, gaps caught up %d", len(seen), a.observeGaps.Load())

	// 2. Promotion of the light member to learner (a snapshot restore) with
	// changes it never got.
	faultsOf(f, a).DropPushes(true)
	for i := 1; i <= 5; i++ {
		proclaimUnsure(t, ctx, z, fmt.Sprintf("p%d", i))
	}
	_, learners, err := voter.ConfState(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, learners)
	slot := slotWhere(f, func(n *Node) bool { return n.ID() == learners[0] })
	require.NotZero(t, slot)
	f.Crash(slot)
	require.Eventually(t, func() bool { return !a.light() }, 60*time.Second, 20*time.Millisecond,
		"the light member is promoted to learner")
	faultsOf(f, a).DropPushes(false)
	require.NoError(t, z.Release(ctx))
	fin := campaign("final")
	var end error
	for end == nil {
		select {
		case c, ok := <-ch:
			if !ok {
				end = <-errc
				break
			}
			seen = append(seen, c)
			if c.Value == "final" {
				end = errors.New("done")
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("part 2: neither the final change nor an end observed in 20 s; seen %v", seen)
		}
	}
	want := applied("eg", first.Index)
	if errors.Is(end, lockerr.ErrObserveLagged) {
		require.LessOrEqual(t, len(seen), len(want))
		require.Equal(t, want[:len(seen)], seen, "part 2: a lagged observation is a prefix of the applied changes")
		t.Logf("part 2: ended with lockerr.ErrObserveLagged after %d changes (of %d applied)", len(seen), len(want))
	} else {
		require.Equal(t, want, seen, "part 2: the promoted member observed exactly the applied changes")
		t.Logf("part 2: %d changes observed, none missed", len(seen))
	}
	require.NoError(t, fin.Release(ctx))
}

// TestObserveAcrossSnapshotRestore (Observe): a raft member whose
// lock table is replaced by a snapshot covering election changes it never
// applied does not hand its observer the current state in their place (a
// fold): the observation ends with lockerr.ErrObserveLagged after exactly the
// changes it had, and a new observation starts from the current leader and
// then sees the next change.
func TestObserveAcrossSnapshotRestore(t *testing.T) {
	logs := map[uint64]*leaderLog{1: {}, 2: {}, 3: {}}
	tc := newCluster(t, 3, snapshotOften, func(c *Config) { c.Observer = logs[c.ID].observe })
	ctx := ctxT(t, 60*time.Second)
	lead := tc.Member(leader(t, tc))
	fid := follower(t, tc)
	f := tc.Member(fid)
	o, ch := observeChanges(t, ctx, f, "sr")
	first := nextChange(t, ch)
	h, err := lead.AcquireWith(ctx, campaignReq("sr", "lead", "v0"))
	require.NoError(t, err)
	got := nextChange(t, ch)
	require.Equal(t, "v0", got.Value)

	tc.CutOff(fid)
	for i := 1; i <= 80; i++ {
		require.NoError(t, h.Proclaim(ctx, fmt.Sprintf("v%d", i)))
	}
	require.NoError(t, h.Release(ctx))
	tc.Heal()
	require.Eventually(t, func() bool {
		st, err := f.Status(ctx)
		return err == nil && st.SnapshotsRestored > 0
	}, 20*time.Second, 20*time.Millisecond, "the follower was not sent a snapshot")
	var after []LeaderChange
	for ended := false; !ended; {
		select {
		case c, ok := <-ch: // closed when the observation ends
			if !ok {
				ended = true
				break
			}
			after = append(after, c)
		case <-time.After(15 * time.Second):
			t.Fatalf("the observation neither ended nor stayed exact; after v0 it got %v", after)
		}
	}
	_, err = o.Next(ctx)
	require.ErrorIs(t, err, lockerr.ErrObserveLagged, "told, after %v", after)
	// Whatever it got after v0 is exactly what the follower applied before
	// it was cut off (nothing), never a fold.
	require.Empty(t, after, "no change folded from the snapshot (first %v)", first)

	_, ch2 := observeChanges(t, ctx, f, "sr")
	cur := nextChange(t, ch2)
	h2, err := lead.AcquireWith(ctx, campaignReq("sr", "lead", "again"))
	require.NoError(t, err)
	seen := changesUntil(t, ch2, func(c LeaderChange) bool { return c.Value == "again" })
	require.Equal(t, logs[lead.ID()].of("sr", cur.Index), seen, "after the restore, from %v", cur)
	require.Equal(t, h2.Token(), seen[len(seen)-1].Token)
	require.NoError(t, h2.Release(ctx))
}

// TestObserveLeaderRecordsCover (Observe): the leader answers a
// light member's catch-up only from records that cover it — the changes
// after the member's mark, also after the election left the table — and
// otherwise gives the current state, which a member that asked for changes
// takes as "lagged" and tells its observers (lockerr.ErrObserveLagged), never as a
// change. White-box on a real cluster: the leader's loop answers a request
// as it would over the wire.
func TestObserveLeaderRecordsCover(t *testing.T) {
	logs := map[uint64]*leaderLog{1: {}, 2: {}, 3: {}}
	tc := newCluster(t, 3, func(c *Config) { c.Observer = logs[c.ID].observe })
	ctx := ctxT(t, 60*time.Second)
	lead := tc.Member(leader(t, tc))
	h, err := lead.AcquireWith(ctx, campaignReq("tr", "lead", "v0"))
	require.NoError(t, err)
	for i := 1; i <= electionHistoryLen+6; i++ {
		require.NoError(t, h.Proclaim(ctx, fmt.Sprintf("v%d", i)))
	}
	require.NoError(t, h.Release(ctx)) // the election leaves the table
	all := logs[lead.ID()].of("tr", 0)
	require.Len(t, all, electionHistoryLen+8)
	ask := func(after uint64) *transportpb.ObservedElection {
		got := make(chan *transportpb.ObserveResponse, 1)
		require.NoError(t, lead.do(ctx, func() {
			got <- lead.observeOnLeader(99, &transportpb.ObserveRequest{Names: []*transportpb.ObserveName{{Name: "tr", After: after}}})
		}))
		resp := <-got
		require.Len(t, resp.GetElections(), 1, "%v", resp)
		return resp.GetElections()[0]
	}
	states := func(e *transportpb.ObservedElection) []LeaderChange {
		var out []LeaderChange
		for _, st := range e.GetChanges() {
			out = append(out, leaderChangeOf("tr", st))
		}
		return out
	}
	// Covered: the last 10 changes, the resign (nobody) included.
	e := ask(all[len(all)-11].Index)
	require.False(t, e.GetCurrent())
	require.Equal(t, all[len(all)-10:], states(e))
	require.GreaterOrEqual(t, e.GetChain(), all[len(all)-1].Index)
	// Covered, nothing changed since: no change, the mark moves on.
	e = ask(all[len(all)-1].Index)
	require.False(t, e.GetCurrent())
	require.Empty(t, e.GetChanges())
	// Trimmed away (more than electionHistoryLen changes since): not covered.
	e = ask(all[0].Index)
	require.True(t, e.GetCurrent(), "the records do not reach back: the current state, as word of it")
	require.False(t, states(e)[0].leading())

}
