package chaos

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node"
)

// The catalogue under the fault checker: every primitive's workload, model,
// store and observers, and a planted bug per primitive shown caught.

func catalogueWorkload(prims ...string) WorkloadOptions {
	wl := DefaultWorkload()
	wl.Primitives = prims
	return wl
}

// TestCatalogueNoFaults (S1–S7 per primitive): every primitive's clients
// at once, no faults: no violation, every primitive granted, observers saw
// the elections change.
func TestCatalogueNoFaults(t *testing.T) {
	rep := runWorkload(t, catalogueWorkload(AllPrimitives...), runDur())
	checkEveryPrimitive(t, rep)
}

// TestCatalogueCrashAndPartition: the same under crashes (the leader half
// the time) and partitions.
func TestCatalogueCrashAndPartition(t *testing.T) {
	rep := runWorkload(t, catalogueWorkload(AllPrimitives...), 2*runDur(), FaultCrash, FaultIsolateLeader,
		FaultPartitionMajority)
	checkEveryPrimitive(t, rep)
}

func checkEveryPrimitive(t *testing.T, rep *Report) {
	t.Helper()
	t.Logf("per primitive %v, observed %d changes", rep.OpsByPrim, rep.Observed)
	for _, p := range AllPrimitives {
		if rep.OpsByPrim[p] == 0 {
			t.Errorf("no %s operation", p)
		}
	}
	if rep.Observed == 0 {
		t.Error("the observers saw no election change")
	}
}

// The models judge forged histories: a correct one Ok, a violation Illegal.
func TestCatalogueModelsCatchForgedHistories(t *testing.T) {
	check := func(name string, ops []Op, want porcupine.CheckResult) {
		t.Helper()
		if res, _ := CheckCatalogue(ops, nil, 10*time.Second); res != want {
			t.Errorf("%s: judged %s, want %s", name, res, want)
		}
	}
	rw := func(c int, kind OpKind, owner string, shared bool, s, e int64, out Outcome) Op {
		return Op{Client: c, Kind: kind, Prim: PrimRW, Name: "r", Owner: owner, Shared: shared, Start: s, End: e, Outcome: out}
	}
	check("two readers", []Op{rw(0, OpLock, "a", true, 0, 1, OK), rw(1, OpLock, "b", true, 2, 3, OK)}, porcupine.Ok)
	check("a reader beside a writer", []Op{rw(0, OpLock, "w", false, 0, 1, OK), rw(1, OpLock, "b", true, 2, 3, OK)},
		porcupine.Illegal)
	check("a writer beside a reader", []Op{rw(0, OpLock, "a", true, 0, 1, OK), rw(1, OpTryLock, "w", false, 2, 3, OK)},
		porcupine.Illegal)
	check("a try refused on a free lock", []Op{rw(0, OpTryLock, "a", true, 0, 1, Locked)}, porcupine.Illegal)
	check("writer after the readers left", []Op{rw(0, OpLock, "a", true, 0, 1, OK), rw(0, OpUnlock, "a", true, 2, 3, OK),
		rw(1, OpLock, "w", false, 4, 5, OK)}, porcupine.Ok)

	sem := func(c int, kind OpKind, owner string, k int, s, e int64, out Outcome) Op {
		return Op{Client: c, Kind: kind, Prim: PrimSemaphore, Name: "s", Owner: owner, Permits: k, Limit: 3, Start: s, End: e,
			Outcome: out}
	}
	check("permits within N", []Op{sem(0, OpLock, "a", 2, 0, 1, OK), sem(1, OpLock, "b", 1, 2, 3, OK)}, porcupine.Ok)
	check("a permit over N", []Op{sem(0, OpLock, "a", 2, 0, 1, OK), sem(1, OpLock, "b", 2, 2, 3, OK)}, porcupine.Illegal)
	check("released permits reused", []Op{sem(0, OpLock, "a", 2, 0, 1, OK), sem(0, OpUnlock, "a", 2, 2, 3, OK),
		sem(1, OpLock, "b", 3, 4, 5, OK)}, porcupine.Ok)

	el := func(c int, kind OpKind, owner string, s, e int64, out Outcome) Op {
		return Op{Client: c, Kind: kind, Prim: PrimElection, Name: "e", Owner: owner, Start: s, End: e, Outcome: out}
	}
	check("two leaders", []Op{el(0, OpLock, "a", 0, 1, OK), el(1, OpLock, "b", 2, 3, OK)}, porcupine.Illegal)
	check("a proclaim by a non-leader", []Op{el(0, OpLock, "a", 0, 1, OK), el(1, OpProclaim, "b", 2, 3, OK)},
		porcupine.Illegal)
	check("a proclaim by the leader", []Op{el(0, OpLock, "a", 0, 1, OK), el(0, OpProclaim, "a", 2, 3, OK)}, porcupine.Ok)

	m := func(c int, kind OpKind, owner string, names []string, s, e int64, out Outcome) Op {
		return Op{Client: c, Kind: kind, Prim: PrimMulti, Group: "g", Name: names[0], Names: names, Owner: owner, Start: s,
			End: e, Outcome: out}
	}
	check("disjoint groups", []Op{m(0, OpLock, "a", []string{"x", "y"}, 0, 1, OK), m(1, OpLock, "b", []string{"z"}, 2, 3, OK)},
		porcupine.Ok)
	check("one name of a held group", []Op{m(0, OpLock, "a", []string{"x", "y"}, 0, 1, OK),
		m(1, OpLock, "b", []string{"y"}, 2, 3, OK)}, porcupine.Illegal)
	check("a try refused with nothing held", []Op{m(0, OpTryLock, "a", []string{"x", "y"}, 0, 1, Locked)}, porcupine.Illegal)
}

// The store's catalogue sections: a stale reader is fenced after a writer,
// a stale writer after readers, and permits are admitted newest first.
func TestStoreCatalogueSections(t *testing.T) {
	s := NewFencedStore()
	r := s.EnterSection(&Section{Name: "x", Owner: "r", Token: 5, Kind: SectionShared, Live: func() bool { return false }})
	if !s.Write(r) {
		t.Fatal("reader refused")
	}
	w := s.EnterSection(&Section{Name: "x", Owner: "w", Token: 7})
	s.Write(w)
	if s.Write(r) {
		t.Fatal("a reader granted before the writer wrote after it")
	}
	s.Exit(w)
	late := s.EnterSection(&Section{Name: "x", Owner: "w0", Token: 6})
	if s.Write(late) {
		t.Fatal("a stale writer accepted")
	}
	s.Exit(late)
	r2 := s.EnterSection(&Section{Name: "x", Owner: "r2", Token: 9, Kind: SectionShared})
	w2 := s.EnterSection(&Section{Name: "x", Owner: "w2", Token: 8})
	if !s.Write(r2) || s.Write(w2) {
		t.Fatal("a writer below a reader's token accepted, or the reader refused")
	}
	_, _, _, live := s.Counts()
	if live != 1 {
		t.Fatalf("live overlaps %d, want 1 (a writer entered beside a live reader)", live)
	}

	p := NewFencedStore()
	sec := func(tok uint64, k int) *Section {
		return p.EnterSection(&Section{Name: "s", Token: tok, Kind: SectionPermits, Permits: k, Limit: 3})
	}
	a, b := sec(1, 2), sec(2, 1)
	if !p.Write(a) || !p.Write(b) {
		t.Fatal("permits within the limit refused")
	}
	c := sec(3, 2) // 5 live permits of 3: a live overlap; the resource evicts a
	if !p.Write(c) || p.Write(a) {
		t.Fatal("the newest permits must be admitted and the oldest evicted")
	}
	if _, stale, _, live := p.Counts(); live != 1 || stale != 1 {
		t.Fatalf("live %d stale %d, want 1 and 1", live, stale)
	}
}

// CheckObservations catches an observer that missed, repeated or reordered
// a change, or got several changes folded into one state (Observe's promise: never
// silently); it accepts an observation cut short, as one ended with
// ErrObserveLagged is.
func TestCheckObservationsCatches(t *testing.T) {
	l := NewAppliedLog()
	ch := func(idx, tok uint64, owner, value string) node.LeaderChange {
		return node.LeaderChange{Name: "e", Index: idx, Session: 1, Owner: owner, Token: tok, Value: value}
	}
	log := []node.LeaderChange{ch(10, 10, "a", "1"), ch(12, 10, "a", "2"), ch(15, 15, "b", "3"), {Name: "e", Index: 20}}
	for _, c := range log {
		l.Observe(1, 1, node.ApplyRecord{Index: c.Index, Command: &lockfsm.Command{Kind: lockfsm.KindAcquire},
			Events: []lockfsm.Event{{Kind: lockfsm.EventLeader, Name: "e", Session: c.Session, Owner: c.Owner, Token: c.Token,
				Value: c.Value}}})
	}
	first := ch(11, 10, "a", "1")
	good := &Observation{Node: 1, Name: "e", Changes: []node.LeaderChange{first, log[1], log[2], log[3]}}
	if bad := CheckObservations([]*Observation{good}, l); len(bad) != 0 {
		t.Fatalf("a correct observation flagged: %v", bad)
	}
	lagged := &Observation{Node: 1, Name: "e", Changes: []node.LeaderChange{first, log[1]}, End: lockerr.ErrObserveLagged.Error()}
	if bad := CheckObservations([]*Observation{lagged}, l); len(bad) != 0 {
		t.Fatalf("an observation ended with ErrObserveLagged flagged: %v", bad)
	}
	for name, o := range map[string][]node.LeaderChange{
		"missed":    {first, log[2], log[3]},
		"repeated":  {first, log[1], log[1], log[2]},
		"reordered": {first, log[2], log[1]},
		"bad first": {ch(11, 15, "b", "3"), log[1]},
		// The state at 16 (log[2]'s) in place of log[1] and log[2].
		"folded": {first, ch(16, 15, "b", "3"), log[3]},
	} {
		if bad := CheckObservations([]*Observation{{Node: 1, Name: "e", Changes: o}}, l); len(bad) == 0 {
			t.Errorf("%s change not caught", name)
		}
	}
}
