package lockraft_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft"
	"github.com/lockraft/lockraft/internal/nettest"
)

// checkShippable asserts what a service that ships lockraft's logs needs:
// no WARN or ERROR for a normal lifecycle, no attribute key twice in one
// record (the service's logger already carries "node" and "component"),
// one line per record (no newline in a message or value), and durations as
// text.
func checkShippable(t *testing.T, name string, rec logRecorder) {
	t.Helper()
	recs := rec.records()
	require.NotEmpty(t, recs, "%s logged nothing: the recorder is not wired", name)
	for _, r := range recs {
		if r.level >= slog.LevelWarn {
			t.Logf("%s: %s %s", name, r.level, r.text)
		}
	}
	for _, r := range recs {
		require.Less(t, r.level, slog.LevelWarn, "%s: a normal lifecycle logged %s: %s", name, r.level, r.text)
		seen := map[string]bool{}
		for _, k := range r.keys {
			require.False(t, seen[k], "%s: key %q twice in %q", name, k, r.text)
			seen[k] = true
		}
		require.NotContains(t, r.text, "\n", "%s: a record spans lines: %q", name, r.text)
		require.Empty(t, r.durations, "%s: durations not as text (JSON would print nanoseconds) in %q", name, r.text)
	}
}

// serviceLogger is what a service hands lockraft: its own logger, which
// already names the node and component.
func serviceLogger(rec logRecorder, i int) *slog.Logger {
	return slog.New(rec).With("node", fmt.Sprintf("orders-%d", i), "component", "orders")
}

// lifecycle locks and unlocks on every node (tokens increase: S2), then
// stops them all gracefully (L3: a graceful stop releases at once): the
// first with Leave when leave is set (it goes away for good), then the
// others with Close at once, as a service shutting down does. (Closing them
// one by one with pauses leaves the last without a quorum, which rightly
// warns that no locks can be taken.)
func lifecycle(t *testing.T, nodes []*lockraft.Node, leave bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lockInTurn(ctx, t, nodes, "logs")
	rest := nodes
	if leave {
		require.NoError(t, nodes[0].Leave(ctx))
		rest = nodes[1:]
	}
	errs := make(chan error, len(rest))
	for _, n := range rest {
		go func() { errs <- n.Close(ctx) }()
	}
	for range rest {
		if err := <-errs; err != nil {
			// A member whose session close found no quorum any more (the
			// others stopped first): its session expires by TTL (Close).
			require.ErrorIs(t, err, lockraft.ErrUnavailable)
		}
	}
}

// A normal lifecycle of a static 3-node cluster (form, lock/unlock on each
// member, one leaves for good, the others close) logs nothing at WARN or above and no
// attribute twice. The planted check: a record with a duplicate key and a
// WARN record are caught by checkShippable (TestCheckShippableCatches).
func TestLogsShippableStatic(t *testing.T) {
	peers := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	var nodes []*lockraft.Node
	var recs []logRecorder
	for i := range peers {
		rec := newLogRecorder()
		n, err := lockraft.Join(peers, lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr(peers[i]),
			lockraft.WithLogger(serviceLogger(rec, i)), fast())
		require.NoError(t, err)
		t.Cleanup(func() { n.Close(context.Background()) })
		nodes, recs = append(nodes, n), append(recs, rec)
	}
	lifecycle(t, nodes, true)
	for i, rec := range recs {
		checkShippable(t, fmt.Sprintf("node %d", i+1), rec)
	}
}

// The same for a gossip fleet: formation by founders, memberlist's own
// output (through slog), a member's Leave, gossip shutdown on Close.
func TestLogsShippableGossip(t *testing.T) {
	founders := []string{"orders-0", "orders-1", "orders-2"}
	var nodes []*lockraft.Node
	var recs []logRecorder
	var seeds []string
	for i := range founders {
		rec := newLogRecorder()
		n, err := lockraft.Join(seeds, lockraft.WithDataDir(t.TempDir()), lockraft.WithLogger(serviceLogger(rec, i)),
			lockraft.WithGossip(lockraft.Gossip{Name: founders[i], Founders: founders, Timing: patientProbes()}), fast())
		require.NoError(t, err)
		t.Cleanup(func() { n.Close(context.Background()) })
		nodes, recs = append(nodes, n), append(recs, rec)
		seeds = append(seeds, n.GossipAddr())
	}
	lifecycle(t, nodes, true)
	for i, rec := range recs {
		checkShippable(t, founders[i], rec)
	}
}

// patientProbes is the fast gossip timing with memberlist's LAN probe
// deadlines (an ack within 500 ms, a probe a second): with 100 ms, a member
// starved of CPU on a loaded machine misses a UDP ack and memberlist warns
// that UDP may be misconfigured, which says nothing about the logs.
func patientProbes() lockraft.GossipTiming {
	t := lockraft.FastGossipTiming()
	t.ProbeTimeout, t.ProbeInterval = 500*time.Millisecond, time.Second
	return t
}

// The checker catches what it looks for: a WARN, a key twice, two lines, a
// duration as a number.
func TestCheckShippableCatches(t *testing.T) {
	for _, tc := range []struct {
		name string
		log  func(*slog.Logger)
	}{
		{"warn", func(l *slog.Logger) { l.Warn("bootstrap skipped") }},
		{"duplicate key", func(l *slog.Logger) { l.Info("started", "node", 1) }},
		{"two lines", func(l *slog.Logger) { l.Info("a\nb") }},
		{"duration as a number", func(l *slog.Logger) { l.Info("leader again", "leaderless_for", time.Second) }},
	} {
		rec := newLogRecorder()
		tc.log(serviceLogger(rec, 0))
		ft := &testing.T{}
		done := make(chan struct{})
		go func() { // require stops ft's goroutine with runtime.Goexit
			defer close(done)
			checkShippable(ft, tc.name, rec)
		}()
		<-done
		require.True(t, ft.Failed(), "%s not caught", tc.name)
	}
}

// A member id reads the same everywhere: the node's log lines (its own
// attribute, the leader it follows), a lock's default owner and the member
// an inspection names, all in 16 hex digits, never in decimal. The id is
// one whose decimal and hex forms share no prefix, so neither can pass for
// the other.
func TestMemberIDIsHexEverywhere(t *testing.T) {
	const id = 0xdeadbeef00c0ffee
	hex, dec := lockraft.MemberID(id).String(), strconv.FormatUint(id, 10)
	var logs nettest.LogBuffer
	addr := freeAddr(t)
	n, err := lockraft.Join(nil, lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr(addr),
		lockraft.WithStaticMembers(id, map[lockraft.MemberID]string{id: addr}), fast(),
		lockraft.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	t.Cleanup(func() { n.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	l, err := n.Lock(ctx, "ids")
	require.NoError(t, err)
	v, found, err := n.InspectLock(ctx, "ids")
	require.NoError(t, err)
	require.True(t, found)
	require.NotNil(t, v.Holder)
	require.Equal(t, hex, v.Holder.Member.String())
	require.True(t, strings.HasPrefix(v.Holder.Owner, "node-"+hex+"/call-"),
		"the default owner %q names the member as the MEMBER column does (%s)", v.Holder.Owner, hex)
	require.NoError(t, l.Unlock(ctx))

	require.True(t, logs.HasLine(`msg="leader changed"`, "lockraft_node="+hex, "leader="+hex), logs.String())
	require.NotContains(t, logs.String(), dec, "a member id in decimal")
}
