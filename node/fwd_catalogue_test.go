package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// TestLightMemberCatalogue: a light member (no raft state; node/fwd.go) gets
// every kind of the catalogue through forwarded commands and pushes: a
// read-write lock shared with a raft member, a semaphore whose queued
// request is granted by a push, a multi-name lock, a campaign that waits for
// the leader to resign; and Observe, which sees every change of an election
// in log order (L4: pushed, never polled) although pushes are lost for a
// while (caught up by an Observe call from the gap) and the raft leader crashes
// (resubscribed with the new one): exactly the changes a raft member
// applied.
func TestLightMemberCatalogue(t *testing.T) {
	f, lights, applied := observedLightFleet(t, "lightcat", 6)
	require.NotEmpty(t, lights)
	a := lights[0]
	lead := fleetLeader(t, f, 5*time.Second)
	ctx := ctxT(t, 60*time.Second)
	voter := survivingVoter(t, ctx, f, lead)

	// Read-write: the light member reads beside a raft member, then its
	// queued write is granted by a push once the reader leaves.
	r1, err := a.AcquireWith(ctx, rwReq("rw", "light-r", true, true))
	require.NoError(t, err)
	r2, err := voter.AcquireWith(ctx, rwReq("rw", "voter-r", true, false))
	require.NoError(t, err)
	require.NoError(t, r1.Release(ctx))
	w := acquireAsync(ctx, a, rwReq("rw", "light-w", false, true))
	require.Eventually(t, func() bool { return lead.waiters("rw") == 1 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, r2.Release(ctx))
	wh := w.wait(t)
	require.Greater(t, wh.Token(), r2.Token())
	_, err = voter.AcquireWith(ctx, rwReq("rw", "voter-r2", true, false))
	require.ErrorIs(t, err, lockerr.ErrLocked, "no reader beside the light member's writer")
	require.NoError(t, wh.Release(ctx))

	// Semaphore: the light member's request waits for a permit and is
	// granted by a push; its own error codes travel back (lockerr.ErrPermitsMismatch).
	s1, err := voter.AcquireWith(ctx, semReq("sem", "voter", 2, 2, true))
	require.NoError(t, err)
	sp := acquireAsync(ctx, a, semReq("sem", "light", 1, 2, true))
	require.Eventually(t, func() bool { return lead.waiters("sem") == 1 }, 5*time.Second, 5*time.Millisecond)
	_, err = a.AcquireWith(ctx, semReq("sem", "light2", 1, 3, false))
	require.ErrorIs(t, err, lockerr.ErrPermitsMismatch, "an error code of the catalogue, forwarded")
	require.NoError(t, s1.Release(ctx))
	sh := sp.wait(t)
	require.EqualValues(t, 1, sh.Permits())
	require.NoError(t, sh.Release(ctx))

	// Multi-name: granted in one entry once the single holder releases.
	m, err := voter.Acquire(ctx, "mb", "voter", true, 0)
	require.NoError(t, err)
	mp := acquireAsync(ctx, a, multiReq("light", true, "ma", "mb"))
	require.Eventually(t, func() bool { return lead.waiters("ma") == 1 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, m.Release(ctx))
	mh := mp.wait(t)
	require.Equal(t, []string{"ma", "mb"}, mh.Names())
	require.NoError(t, mh.Release(ctx))

	// Election and Observe.
	_, ch := observeChanges(t, ctx, a, "el")
	first := nextChange(t, ch)
	require.False(t, first.leading())
	vl, err := voter.AcquireWith(ctx, campaignReq("el", "voter", "v0"))
	require.NoError(t, err)
	lp := acquireAsync(ctx, a, campaignReq("el", "light", "light-value"))
	require.Eventually(t, func() bool { return lead.waiters("el") == 1 }, 5*time.Second, 5*time.Millisecond)
	proclaim := func(i int) { proclaimUnsure(t, ctx, vl, fmt.Sprintf("v%d", i)) }
	for i := 1; i <= 5; i++ {
		proclaim(i)
	}
	faultsOf(f, a).DropPushes(true) // these changes are lost on the way
	for i := 6; i <= 10; i++ {
		proclaim(i)
	}
	faultsOf(f, a).DropPushes(false)
	for i := 11; i <= 15; i++ {
		proclaim(i)
	}
	f.Crash(slotOf(f, lead))
	for i := 16; i <= 25; i++ {
		proclaim(i)
	}
	require.NoError(t, vl.Release(ctx)) // hands over to the light member
	lh := lp.wait(t)
	require.Greater(t, lh.Token(), vl.Token())
	seen := changesUntil(t, ch, func(c LeaderChange) bool { return c.Owner == "light" })
	require.Equal(t, applied("el", first.Index), seen, "the light member observed exactly the applied changes")
	t.Logf("light member observed %d changes; gaps caught up %d; fwd-status relearned %d", len(seen),
		a.observeGaps.Load(), a.relearned.Load())
	require.Positive(t, a.observeGaps.Load(), "the lost pushes were noticed and caught up")
	require.NoError(t, lh.Release(ctx))
}

// Pushed events carry the catalogue's fields (PushEvent fields 10-12): a
// round trip over the wire keeps them, and an item without them (a mutex
// event) decodes with none. Results carry every lockfsm error by its stable
// code (lockfsm.ErrorCode), so a light member's caller gets the catalogue's
// sentinels by errors.Is; an unknown code reads as errForwarded.
func TestPushEventCatalogueFields(t *testing.T) {
	ev := lockfsm.Event{Kind: lockfsm.EventReleased, Name: "a", Owner: "o", Session: 7, Token: 9, Reason: lockfsm.ReasonUnlock,
		Mode: lockfsm.ModeShared, Permits: 3, ExtraNames: []string{"b", "c"}}
	wire := func(it *transportpb.PushItem) *transportpb.PushItem {
		b, err := proto.Marshal(it)
		require.NoError(t, err)
		var out transportpb.PushItem
		require.NoError(t, proto.Unmarshal(b, &out))
		return &out
	}
	require.Equal(t, ev, pushedEvent(wire(pushEventItem(&ev)).GetEvent()))
	old := ev
	old.Mode, old.Permits, old.ExtraNames = 0, 0, nil
	require.Equal(t, old, pushedEvent(wire(pushEventItem(&old)).GetEvent()))
	for c := 0; c < 256; c++ {
		want, ok := lockfsm.ErrorForCode(uint8(c))
		if !ok {
			continue
		}
		cmd := lockfsm.Command{Kind: lockfsm.KindAcquire, Session: 5, Seq: 9}
		_, res := pushedResult(wire(pushResultItem(&cmd, lockfsm.Result{Err: want})).GetResult())
		if want == nil {
			require.NoError(t, res.Err)
			continue
		}
		require.ErrorIs(t, res.Err, want, "code %d", c)
	}
	for _, err := range []error{lockfsm.ErrWrongKind, lockfsm.ErrUpgrade, lockfsm.ErrHoldConflict, lockfsm.ErrBadPermits,
		lockfsm.ErrPermitsMismatch, lockfsm.ErrTooManyNames, lockfsm.ErrDuplicateName, lockfsm.ErrInvalidValue,
		lockfsm.ErrNewerFormat, lockerr.ErrOlderMembers, nil} {
		require.ErrorIs(t, codeErr(errCode(err)), err)
	}
	require.ErrorIs(t, codeErr(200), errForwarded)
	require.ErrorIs(t, codeErr(1<<20), errForwarded)
}

// largestLockAll is a LockAll at lockfsm's limits: MaxMultiNames names of
// maxNameLen bytes, an owner of maxOwnerLen.
func largestLockAll(prefix string) Request {
	names := make([]string, lockfsm.MaxMultiNames)
	for i := range names {
		names[i] = fmt.Sprintf("%s%02d", prefix, i) + strings.Repeat("n", lockfsm.MaxNameLen-len(prefix)-2)
	}
	return multiReq(strings.Repeat("o", lockfsm.MaxOwnerLen), true, names...)
}

// TestLargestCommandFits: the largest command lockfsm accepts (every field at
// its limit) fits maxCommandSize, and a forwarded proposal of it passes the
// leader's guard.
func TestLargestCommandFits(t *testing.T) {
	r := largestLockAll("big/")
	c := lockfsm.Command{Kind: lockfsm.KindAcquire, Session: 1 << 62, Seq: 1 << 62, AckedBelow: 1 << 62, Name: r.Name,
		ExtraNames: r.ExtraNames, Owner: r.Owner, Wait: true, LeaseMillis: 1 << 62, TTLMillis: 1 << 62,
		LockDelayMillis: 1 << 62, MaxHolds: 1 << 31, Value: strings.Repeat("v", lockfsm.MaxValueLen),
		Limit: lockfsm.MaxPermits, Permits: lockfsm.MaxPermits, Token: 1 << 62}
	b := c.AppendEncode(nil)
	_, err := lockfsm.DecodeCommand(b)
	require.NoError(t, err)
	t.Logf("largest command: %d bytes, cap %d", len(b), maxCommandSize)
	require.LessOrEqual(t, len(b), maxCommandSize)
	require.NoError(t, checkProposal(&raftpb.Message{Type: raftpb.MessageType_MsgProp.Enum(),
		Entries: []*raftpb.Entry{{Type: raftpb.EntryType_EntryNormal.Enum(), Data: b}}}))
}

// TestLargestLockAllForwarded (L1 for the catalogue's largest request, S4):
// a LockAll of MaxMultiNames names of maxNameLen bytes with the longest
// owner (about 16.7 KiB encoded) is granted from a light member (FwdPropose)
// and from a raft follower (MsgProp to the leader), and released: the
// leader's per-entry cap on forwarded commands admits what lockfsm admits.
func TestLargestLockAllForwarded(t *testing.T) {
	f, lights := lightFleet(t, "bigcmd", 6, nil)
	require.NotEmpty(t, lights)
	lead := fleetLeader(t, f, 5*time.Second)
	var follower *Node
	for _, n := range f.All() {
		if n != lead && !n.light() {
			follower = n
			break
		}
	}
	require.NotNil(t, follower)
	ctx := ctxT(t, 30*time.Second)
	for i, n := range []*Node{lights[0], follower} {
		r := largestLockAll(fmt.Sprintf("big%d/", i))
		var h *Hold
		for {
			// A session lost while the fleet settles (a starved machine)
			// is retried: it says nothing about the command's size, and
			// a failed Acquire leaves nothing behind (S4).
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			var err error
			h, err = n.AcquireWith(actx, r)
			cancel()
			if errors.Is(err, lockerr.ErrSessionExpired) && ctx.Err() == nil {
				t.Logf("light=%v: %v; again", n.light(), err)
				continue
			}
			require.NoError(t, err, "light=%v", n.light())
			break
		}
		require.Len(t, h.Names(), lockfsm.MaxMultiNames)
		if err := h.Release(ctx); err != nil {
			// Lost with a session that expired on a starved machine: the
			// hold ended with it; the command's size was shown above.
			require.ErrorIs(t, err, lockerr.ErrSessionExpired, "light=%v", n.light())
		}
	}
}
