package chaos

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node"
)

// Planted bugs: each shows a check catching a bug we put in on purpose.

// A forged grant: b is granted while a still holds (nobody released).
func TestPlantedForgedOverlapFailsPorcupine(t *testing.T) {
	ok := []Op{
		{Client: 0, Kind: OpLock, Name: "x", Owner: "a", Start: 0, End: 10, Outcome: OK, Token: 5},
		{Client: 0, Kind: OpUnlock, Name: "x", Owner: "a", Start: 20, End: 30, Outcome: OK},
		{Client: 1, Kind: OpLock, Name: "x", Owner: "b", Start: 15, End: 40, Outcome: OK, Token: 7},
		{Client: 2, Kind: OpTryLock, Name: "x", Owner: "c", Start: 41, End: 42, Outcome: Locked},
	}
	if res, _ := CheckLinearizable(ok, nil, 10*time.Second); res != porcupine.Ok {
		t.Fatalf("correct history judged %s", res)
	}
	forged := append([]Op(nil), ok...)
	forged[2].Start, forged[2].End = 11, 12 // b granted before a's Unlock was even called
	if res, _ := CheckLinearizable(forged, nil, 10*time.Second); res != porcupine.Illegal {
		t.Fatalf("forged overlapping grant judged %s, want Illegal", res)
	}
	// TryLock saying "locked" on a free name.
	bad := []Op{{Client: 2, Kind: OpTryLock, Name: "x", Owner: "c", Start: 0, End: 1, Outcome: Locked}}
	if res, _ := CheckLinearizable(bad, nil, 10*time.Second); res != porcupine.Illegal {
		t.Fatalf("ErrLocked on a free name judged %s", res)
	}
	// Unlock ok by someone who never held it.
	bad = []Op{{Client: 2, Kind: OpUnlock, Name: "x", Owner: "c", Start: 0, End: 1, Outcome: OK}}
	if res, _ := CheckLinearizable(bad, nil, 10*time.Second); res != porcupine.Illegal {
		t.Fatalf("Unlock of a free name judged %s", res)
	}
	// A Lock that timed out but whose grant the log shows (and the ghost
	// release that followed) explains a TryLock's ErrLocked: legal.
	ghost := []Op{
		{Client: 0, Kind: OpLock, Name: "x", Owner: "a", Start: 0, End: 10, Outcome: Unknown},
		{Client: 1, Kind: OpTryLock, Name: "x", Owner: "b", Start: 11, End: 12, Outcome: Locked},
		{Client: 1, Kind: OpLock, Name: "x", Owner: "c", Start: 13, End: 20, Outcome: OK},
	}
	if res, _ := CheckLinearizable(ghost, func(string) bool { return true }, 10*time.Second); res != porcupine.Ok {
		t.Fatalf("ghost grant judged %s", res)
	}
	// ...but not when the log shows the timed-out Lock was never granted
	// (S4: no effect).
	if res, _ := CheckLinearizable(ghost, func(string) bool { return false }, 10*time.Second); res != porcupine.Illegal {
		t.Fatalf("ErrLocked explained by a Lock that never took effect judged %s", res)
	}
}

// A store that accepts stale tokens lets a holder that lost its lock write
// between the next holder's writes.
func TestPlantedStaleStoreCaught(t *testing.T) {
	for _, buggy := range []bool{false, true} {
		s := NewFencedStore()
		s.AcceptStale = buggy
		a := s.Enter("x", "a", 5, func() bool { return false })
		s.Write(a)
		b := s.Enter("x", "b", 9, nil)
		s.Write(b)
		s.Write(a) // a lost its lock (expiry) but writes on
		s.Exit(a)
		s.Write(b)
		s.Exit(b)
		_, stale, accepted, _ := s.Counts()
		if buggy && accepted == 0 {
			t.Fatal("stale-accepting store: overlap not counted")
		}
		if !buggy && (accepted != 0 || stale != 1) {
			t.Fatalf("correct store: accepted=%d stale=%d, want 0 and 1", accepted, stale)
		}
	}
}

// A log whose grants of a name go backwards, or grant a held name, is caught.
func TestPlantedTokenRegressionCaught(t *testing.T) {
	l := NewAppliedLog()
	rec := func(idx, tok uint64, owner string) node.ApplyRecord {
		return node.ApplyRecord{Index: idx, Command: &lockfsm.Command{Kind: lockfsm.KindAcquire, Name: "x", Owner: owner},
			Events: []lockfsm.Event{{Kind: lockfsm.EventGranted, Name: "x", Owner: owner, Token: tok}}}
	}
	l.Observe(1, 1, rec(10, 10, "a"))
	l.Observe(1, 1, rec(12, 9, "b")) // token lower than the last grant
	if bad := l.TokenOrder(); len(bad) == 0 {
		t.Fatal("token regression not caught")
	}
	l.Observe(2, 1, rec(10, 10, "z")) // another replica applied something else at 10
	if d := l.Divergence(); len(d) == 0 {
		t.Fatal("replica divergence not caught")
	}
	if lost := l.AckedLost([]Op{{Kind: OpLock, Name: "x", Owner: "q", Outcome: OK, Token: 11}}); len(lost) == 0 {
		t.Fatal("acknowledged grant missing from the log not caught")
	}
}

// A client that enters its critical section after a failed Lock, on a real
// cluster: the lock-set check sees two live holders, and with a store that
// accepts stale tokens the fencing check sees accepted overlaps.
func TestPlantedClientIgnoresFailedLock(t *testing.T) {
	store := NewFencedStore()
	store.AcceptStale = true
	wl := DefaultWorkload()
	wl.BugIgnoreFailedLock = true
	wl.Names = []string{"a"}
	wl.MaxHold = 40 * time.Millisecond
	rep, err := Run(context.Background(), RunConfig{Seed: seed(t), Duration: 3 * time.Second, BaseDir: t.TempDir(),
		Workload: wl, Store: store, SkipDurability: true, CheckTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("violations: %s", strings.Join(rep.Violations, "; "))
	if rep.Live == 0 || rep.Accepted == 0 {
		t.Fatalf("planted client bug not caught: live=%d accepted=%d", rep.Live, rep.Accepted)
	}
	if len(rep.Violations) == 0 {
		t.Fatal("no violation reported")
	}
}
