package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/lockfsm"
)

// submitInOneTurn submits k Acquires on distinct names from a single loop
// turn, as k callers whose calls arrive together would, and waits for all.
func submitInOneTurn(t *testing.T, n *Node, prefix string, k int) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	ops := make([]*op, k)
	dones := make([]chan struct{}, k) // each op's done, which completing it clears
	for i := range ops {
		ops[i] = newCallerOp(lockfsm.Command{Kind: lockfsm.KindAcquire, Name: fmt.Sprintf("%s/%d", prefix, i),
			Owner: "o", Wait: true, MaxHolds: n.cfg.MaxHolds})
		dones[i] = ops[i].done
	}
	require.NoError(t, n.do(ctx, func() {
		for _, o := range ops {
			o.hold = holdRequest{sentAt: n.clock.Now()}
			n.submit(o)
		}
	}))
	for i, o := range ops {
		select {
		case <-dones[i]:
			require.NoError(t, o.out.err)
			require.NotNil(t, o.out.hold, "granted")
		case <-ctx.Done():
			t.Fatal("acquire did not complete")
		}
	}
}

func sentAppends(t *testing.T, n *Node) (appends, entries uint64) {
	t.Helper()
	st, err := n.Status(ctxT(t, 5*time.Second))
	require.NoError(t, err)
	return st.AppendsSent, st.EntriesSent
}

// Commands proposed in one loop turn reach the followers together: one
// append per follower (raft sends a MsgApp per MsgProp it steps), not one
// per command. Checked for commands made on the leader and on a follower
// (whose turn is forwarded to the leader as one MsgProp). Performance only;
// the order of commands is unchanged (L2).
func TestProposalsOfOneTurnShareAnAppend(t *testing.T) {
	tc := newCluster(t, 3)
	lead := leader(t, tc)
	ctx := ctxT(t, 10*time.Second)
	// Sessions open and the log settles first.
	for _, n := range tc.All() {
		h, err := n.Acquire(ctx, "warm", "w", true, 0)
		require.NoError(t, err)
		require.NoError(t, h.Release(ctx))
	}
	const k = 32
	for _, from := range []uint64{lead, follower(t, tc)} {
		a0, e0 := sentAppends(t, tc.Member(lead))
		submitInOneTurn(t, tc.Member(from), fmt.Sprintf("turn-%d", from), k)
		a1, e1 := sentAppends(t, tc.Member(lead))
		appends, entries := a1-a0, e1-e0
		t.Logf("from node %d: %d commands reached 2 followers in %d appends (%d entries)", from, k, appends, entries)
		require.GreaterOrEqual(t, entries, uint64(2*k), "every command reached both followers")
		// One append per follower, and slack for a heartbeat-time retry
		// or a keepalive expiry proposal landing in between.
		require.LessOrEqual(t, appends, uint64(2*3), "commands of one turn were sent one append each")
	}
}

// A configuration change proposed on a follower (raft forwards it to the
// leader as a MsgProp) is refused by the leader: configuration changes are
// only the leader's own (reconcile, a member's own leave), never a peer's
// proposal, so no member can shrink or brick the configuration (S1, S7).
// Once the leader proposed it as it was (this test asserted it
// committed).
func TestForwardedConfChangeIsRefused(t *testing.T) {
	tc := newCluster(t, 3)
	lead := leader(t, tc)
	f := tc.Member(follower(t, tc))
	ctx := ctxT(t, 10*time.Second)
	const learner = 9
	require.NoError(t, f.do(ctx, func() {
		cc := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{
			Type: raftpb.ConfChangeAddLearnerNode.Enum(), NodeId: new(uint64(learner))}}}
		require.NoError(t, f.rn.ProposeConfChange(cc))
	}))
	require.Eventually(t, func() bool { return refusals(tc.Member(lead), "raft message") >= 1 }, 10*time.Second, 5*time.Millisecond)
	// A command after it commits everywhere; the change never does.
	h, err := f.Acquire(ctx, "after", "o", true, 0)
	require.NoError(t, err)
	require.NoError(t, h.Release(ctx))
	for _, n := range tc.All() {
		_, learners, err := n.ConfState(ctx)
		require.NoError(t, err)
		require.NotContains(t, learners, uint64(learner), "node %d applied a forwarded configuration change", n.ID())
	}
}

// The loop encodes its commands into a shared arena, and raft, the appender
// and the transport hold the bytes after the turn that proposed them (a
// follower's forwarded proposal waits in the transport's queue). No later
// encode may change them, whether it fits the arena, starts a new chunk or
// is larger than a chunk; and none may be appended to in place (S3, S6: what
// is sent is what was proposed).
func TestProposalBytesStayAsEncoded(t *testing.T) {
	var b proposalBatch
	type encoded struct {
		cmd  lockfsm.Command
		data []byte
		want []byte
	}
	var all []encoded
	for i := range 2000 {
		c := lockfsm.Command{Kind: lockfsm.KindAcquire, Session: 7, Seq: uint64(i + 1), Name: fmt.Sprintf("n/%d", i),
			Owner: "o", Wait: true}
		switch {
		case i%97 == 0: // larger than the room a command starts in
			for j := range 20 {
				c.ExtraNames = append(c.ExtraNames, fmt.Sprintf("extra/%d/%d", i, j))
			}
		case i == 1000: // larger than a chunk
			for j := range lockfsm.MaxMultiNames - 1 {
				c.ExtraNames = append(c.ExtraNames, fmt.Sprintf("wide/%d/%s", j, strings.Repeat("w", 400)))
			}
		}
		data := b.encode(&c)
		require.Equal(t, len(data), cap(data), "command %d: an append to its bytes would write into the arena", i)
		all = append(all, encoded{cmd: c, data: data, want: c.AppendEncode(nil)})
	}
	for i, e := range all {
		require.Equal(t, e.want, e.data, "command %d changed after it was encoded", i)
		got, err := lockfsm.DecodeCommand(e.data)
		require.NoError(t, err, "command %d", i)
		require.Equal(t, e.cmd.Name, got.Name)
		require.Equal(t, e.cmd.ExtraNames, got.ExtraNames)
	}
}
