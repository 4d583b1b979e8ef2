package node

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/cryptotest"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/cluster"
	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
)

// history is one member's applied commands with their events (Config.Observer), copied.
type history struct {
	mu   sync.Mutex
	recs []ApplyRecord
	// onEvent, if set, is called (on the loop) for every event as it is recorded.
	onEvent func(lockfsm.Event)
}

func (h *history) observe(r ApplyRecord) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := *r.Command
	r.Command = &c
	r.Events = slices.Clone(r.Events)
	h.recs = append(h.recs, r)
	if h.onEvent != nil {
		for _, e := range r.Events {
			h.onEvent(e)
		}
	}
}

func (h *history) snapshot() []ApplyRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.recs)
}

// runSize is the run size of the session-end tests: small, so that forty names take ten entries.
const runSize = 4

// TestSessionEndsInRuns: a session holding and waiting for more names than SessionEndRun ends over
// several entries of at most that many names each, on the simulated network (seeded, in a synctest
// bubble) and on real gRPC:
//   - closed by its member (a follower, or the leader, which stops at once and leaves the runs to the
//     next, who finds the session ending in its table: without the leader's tick proposing runs, the end
//     stops there, tried): the other member's waiters on its names are granted, in order, with newer tokens (S2);
//     nothing is granted to it once it is ending (S4);
//   - expired after its member crashed, with the leader cut off as the end began: the new leader carries
//     on with the runs, and the waiters are granted (L3).
func TestSessionEndsInRuns(t *testing.T) {
	for _, mode := range []endMode{endByClose, endByLeaderClose, endByExpiry} {
		name := [...]string{"close", "close-by-leader", "expire-then-leader-cut-off"}[mode]
		for seed := uint64(1); seed <= 2; seed++ {
			t.Run(fmt.Sprintf("%s/sim-seed-%d", name, seed), func(t *testing.T) {
				inSimBubble(t, seed, func(t *testing.T) {
					hs := map[uint64]*history{}
					tc := newSimCluster(t, 5, seed, observeInto(hs), func(c *Config) { c.SessionEndRun = runSize })
					sessionEndsInRuns(t, tc, hs, mode)
				})
			})
		}
		t.Run(name+"/grpc", func(t *testing.T) {
			hs := map[uint64]*history{}
			tc := newCluster(t, 5, observeInto(hs), func(c *Config) { c.SessionEndRun = runSize })
			sessionEndsInRuns(t, tc, hs, mode)
		})
	}
}

// inSimBubble runs f in a synctest bubble with one P and crypto/rand seeded with seed: on the simulated
// network, the same seed replays the same run.
func inSimBubble(t *testing.T, seed uint64, f func(t *testing.T)) {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	synctest.Test(t, func(t *testing.T) {
		cryptotest.SetGlobalRandom(t, seed)
		f(t)
	})
}

// observeInto gives every member a history in hs (filled before the member starts).
func observeInto(hs map[uint64]*history) func(*Config) {
	var mu sync.Mutex
	return func(c *Config) {
		h := &history{}
		mu.Lock()
		hs[c.ID] = h
		mu.Unlock()
		c.Observer = h.observe
	}
}

// endMode is how TestSessionEndsInRuns ends the session.
type endMode int

const (
	endByClose       endMode = iota // its member, a follower, closes it
	endByLeaderClose                // its member, the leader, closes it
	endByExpiry                     // its member crashes; the leader expires it and is cut off at once
)

func sessionEndsInRuns(t *testing.T, tc *cluster.Cluster[*Node], hs map[uint64]*history, mode endMode) {
	ctx := ctxT(t, 60*time.Second)
	lead := leader(t, tc)
	a := otherThan(tc, lead)
	if mode == endByLeaderClose {
		a = lead
	}
	b := otherThan(tc, lead, a)
	na, nb := tc.Member(a), tc.Member(b)

	// a holds forty names and waits for z, which b holds; b waits for three of a's names.
	var names []string
	tokens := map[string]uint64{}
	for i := range 40 {
		n := fmt.Sprintf("n/%02d", i)
		h, err := na.Acquire(ctx, n, "a", false, 0)
		require.NoError(t, err)
		names, tokens[n] = append(names, n), h.Token()
	}
	_, err := nb.Acquire(ctx, "z", "b", false, 0)
	require.NoError(t, err)
	aWait := make(chan error, 1)
	go func() { _, err := na.Acquire(ctx, "z", "a", true, 0); aWait <- err }()
	wanted := []string{"n/05", "n/17", "n/39"}
	type grant struct {
		name  string
		token uint64
		err   error
	}
	grants := make(chan grant, len(wanted))
	for _, n := range wanted {
		go func() {
			h, err := nb.Acquire(ctx, n, "b", true, 0)
			g := grant{name: n, err: err}
			if err == nil {
				g.token = h.Token()
			}
			grants <- g
		}()
	}
	waiters := func(name string) int {
		v, ok, err := nb.InspectLock(ctx, name, ReadOptions{})
		if err != nil || !ok {
			return 0
		}
		return len(v.Waiters)
	}
	require.Eventually(t, func() bool {
		return waiters("z") == 1 && waiters("n/05") == 1 && waiters("n/17") == 1 && waiters("n/39") == 1
	}, 20*time.Second, 10*time.Millisecond, "waiters not queued")

	if mode == endByExpiry {
		// The leader is cut off from the others as it applies the entry that began the end, before the
		// proposal of the next run it makes then can leave it: no run is on its way when the others elect
		// a new leader, which must find the ending session in its table and carry on.
		var once sync.Once
		cut := make(chan struct{})
		hl := hs[lead]
		hl.mu.Lock()
		hl.onEvent = func(e lockfsm.Event) {
			if e.Kind == lockfsm.EventSessionEnding {
				once.Do(func() { tc.Isolate(lead); close(cut) })
			}
		}
		hl.mu.Unlock()
		tc.Crash(a)
		select {
		case <-cut:
		case <-ctx.Done():
			t.Fatal("the crashed member's session never began ending")
		}
		t.Logf("crashed member %d; leader %d cut off as the end began", a, lead)
	} else {
		require.NoError(t, na.Close(ctx))
		require.ErrorIs(t, <-aWait, lockerr.ErrClosed, "a's own wait ends with its close")
	}
	for range wanted {
		select {
		case g := <-grants:
			require.NoError(t, g.err, g.name)
			require.Greater(t, g.token, tokens[g.name], "S2: %s granted again with an older token", g.name)
		case <-ctx.Done():
			t.Fatal("b's waiters were not granted")
		}
	}
	// The end as b applied it: a's session ending, runs of at most runSize names, no grant to it, then
	// its end.
	var session uint64
	require.Eventually(t, func() bool {
		for _, r := range hs[b].snapshot() {
			for _, e := range r.Events {
				if e.Kind == lockfsm.EventSessionEnded && e.Session == session && session != 0 {
					return true
				}
				if e.Kind == lockfsm.EventSessionEnding {
					session = e.Session
				}
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "a's session never ended")
	entries, ending := 0, false
	ended := map[string]bool{}
	for _, r := range hs[b].snapshot() {
		touched := map[string]bool{}
		for _, e := range r.Events {
			switch {
			case e.Kind == lockfsm.EventSessionEnding && e.Session == session:
				ending = true
			case e.Kind == lockfsm.EventGranted && e.Session == session && ending:
				t.Fatalf("S4: entry %d granted %s to the ending session", r.Index, e.Name)
			case (e.Kind == lockfsm.EventReleased || e.Kind == lockfsm.EventWaitEnded) && e.Session == session:
				require.True(t, ending, "entry %d ended %s before the session was ending", r.Index, e.Name)
				touched[e.Name] = true
				ended[e.Name] = true
			}
		}
		if len(touched) > 0 {
			entries++
			require.LessOrEqual(t, len(touched), runSize, "entry %d (%v) ended %d names", r.Index, r.Command.Kind, len(touched))
		}
	}
	require.Len(t, ended, len(names)+1, "every name a held or waited for")
	require.GreaterOrEqual(t, entries, (len(names)+1+runSize-1)/runSize)
	t.Logf("session %d ended in %d entries", session, entries)
}

// TestSessionEndResumesAfterRestart: every member crashes while a session is ending over several
// entries (its own member first, whose crash began the end by expiry); restarted from their data directories, the members find it ending in their tables and the new
// leader carries on with its runs until it has ended, and its names are granted to others (L3). On the
// simulated network (seeded, in a synctest bubble) and on real gRPC.
func TestSessionEndResumesAfterRestart(t *testing.T) {
	for seed := uint64(1); seed <= 2; seed++ {
		t.Run(fmt.Sprintf("sim-seed-%d", seed), func(t *testing.T) {
			inSimBubble(t, seed, func(t *testing.T) {
				hs := map[uint64]*history{}
				tc := newSimCluster(t, 3, seed, observeInto(hs), func(c *Config) { c.SessionEndRun = runSize })
				sessionEndResumesAfterRestart(t, tc, hs)
			})
		})
	}
	t.Run("grpc", func(t *testing.T) {
		hs := map[uint64]*history{}
		tc := newCluster(t, 3, observeInto(hs), func(c *Config) { c.SessionEndRun = runSize })
		sessionEndResumesAfterRestart(t, tc, hs)
	})
}

func sessionEndResumesAfterRestart(t *testing.T, tc *cluster.Cluster[*Node], hs map[uint64]*history) {
	ctx := ctxT(t, 60*time.Second)
	lead := leader(t, tc)
	a := otherThan(tc, lead)
	b := otherThan(tc, lead, a)
	na := tc.Member(a)
	for i := range 40 {
		_, err := na.Acquire(ctx, fmt.Sprintf("n/%02d", i), "a", false, 0)
		require.NoError(t, err)
	}
	// a crashes; the leader expires its session; the two others crash as soon as b applied the expiry that
	// began the end.
	var once sync.Once
	crashed := make(chan struct{})
	var session uint64
	hb := hs[b]
	hb.mu.Lock()
	hb.onEvent = func(e lockfsm.Event) {
		if e.Kind == lockfsm.EventSessionEnding {
			session = e.Session
			once.Do(func() {
				go func() {
					for _, id := range tc.Running() {
						tc.Crash(id)
					}
					close(crashed)
				}()
			})
		}
	}
	hb.mu.Unlock()
	tc.Crash(a)
	select {
	case <-crashed:
	case <-ctx.Done():
		t.Fatal("the session never began ending")
	}
	require.NotZero(t, session)
	require.NoError(t, tc.Restart(lead))
	require.NoError(t, tc.Restart(b))
	t.Logf("member %d crashed, then the two others while its session %d was ending; restarted %d and %d", a, session, lead, b)
	// The ending session's last name goes to b once the end is over.
	h, err := tc.Member(b).Acquire(ctx, "n/39", "b", true, 0)
	require.NoError(t, err, "L3: the ending session's names were never released")
	require.NotZero(t, h.Token())
	require.Eventually(t, func() bool {
		for _, r := range hs[b].snapshot() {
			for _, e := range r.Events {
				if e.Kind == lockfsm.EventSessionEnded && e.Session == session {
					return true
				}
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "the session never ended after the restart")
}
