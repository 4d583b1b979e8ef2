package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The applied log's times close the intervals of operations whose outcome
// the client did not learn (ToPorcupineCatalogue). They must never fail a
// correct history, and they must let the checker see what open intervals
// hide.

func logFacts(m map[string]LogOutcome) Outcomes {
	return func(owner string) LogOutcome { return m[owner] }
}

// The bounds are upper bounds: a grant had happened by GrantedBy, a hold's
// end by EndedBy. They never tell the checker an effect came late, only
// that it had come, so what they add is the lock free again: a try refused
// after every hold had ended in the log is illegal, where open intervals
// would let the unknown hold run on forever.

// A writer whose Lock timed out; the log granted it by 5 and ended its hold
// (session expiry) by 30. A reader's TryRLock refused at 35–36, with nobody
// else holding, is a stale answer.
func TestLogBoundsSeeAStaleRefusalAfterAnUnknownWriter(t *testing.T) {
	rw := func(c int, kind OpKind, owner string, shared bool, s, e int64, out Outcome) Op {
		return Op{Client: c, Kind: kind, Prim: PrimRW, Name: "r", Owner: owner, Shared: shared, Start: s, End: e, Outcome: out}
	}
	writer := rw(0, OpLock, "w", false, 0, 50, Unknown)
	facts := logFacts(map[string]LogOutcome{"w": {Granted: true, GrantedBy: 5, EndedBy: 30}})
	stale := []Op{writer, rw(1, OpTryLock, "a", true, 35, 36, Locked)}
	if res, _ := CheckCatalogue(stale, GrantedOnly(func(string) bool { return true }), 10*time.Second); res != porcupine.Ok {
		t.Fatalf("open intervals: judged %s (the checker without times cannot see this)", res)
	}
	if res, _ := CheckCatalogue(stale, facts, 10*time.Second); res != porcupine.Illegal {
		t.Fatalf("with the log's times: judged %s, want Illegal", res)
	}
	// Refused at 20–21, while the log may still have had the writer: legal.
	ok := []Op{writer, rw(1, OpTryLock, "a", true, 20, 21, Locked), rw(1, OpLock, "b", true, 40, 41, OK)}
	if res, _ := CheckCatalogue(ok, facts, 10*time.Second); res != porcupine.Ok {
		t.Fatalf("a correct history with the log's times: judged %s", res)
	}
}

// A semaphore of 2 permits: a holder whose release timed out (the log ended
// its hold by 15). A TryAcquire of 2 refused at 40–41 is stale; a caller
// granted 2 permits at 19–21 is correct.
func TestLogBoundsSeeAStaleRefusalAfterAnUnknownRelease(t *testing.T) {
	sem := func(c int, kind OpKind, owner string, k int, s, e int64, out Outcome) Op {
		return Op{Client: c, Kind: kind, Prim: PrimSemaphore, Name: "s", Owner: owner, Permits: k, Limit: 2, Start: s, End: e,
			Outcome: out}
	}
	hold := []Op{
		sem(0, OpLock, "a", 1, 0, 1, OK),
		{Client: 0, Kind: OpUnlock, Prim: PrimSemaphore, Name: "s", Owner: "a", Permits: 1, Limit: 2, Start: 10, End: 60,
			Outcome: Unknown, HeldFrom: 1},
	}
	facts := logFacts(map[string]LogOutcome{"a": {Granted: true, GrantedBy: 1, EndedBy: 15}})
	stale := append(slices.Clone(hold), sem(1, OpTryLock, "b", 2, 40, 41, Locked))
	if res, _ := CheckCatalogue(stale, nil, 10*time.Second); res != porcupine.Ok {
		t.Fatalf("open intervals: judged %s", res)
	}
	if res, _ := CheckCatalogue(stale, facts, 10*time.Second); res != porcupine.Illegal {
		t.Fatalf("with the log's times: judged %s, want Illegal", res)
	}
	ok := append(slices.Clone(hold), sem(1, OpLock, "b", 2, 19, 21, OK))
	if res, _ := CheckCatalogue(ok, facts, 10*time.Second); res != porcupine.Ok {
		t.Fatalf("released by 15, b granted at 19–21: judged %s", res)
	}
}

// A bound earlier than the operation's call is not used (the interval stays
// open), so it cannot turn a history upside down.
func TestLogBoundsBeforeTheCallAreIgnored(t *testing.T) {
	ops := []Op{{Client: 0, Kind: OpLock, Name: "x", Owner: "a", Start: 10, End: 20, Outcome: Unknown}}
	conv := ToPorcupineCatalogue(ops, logFacts(map[string]LogOutcome{"a": {Granted: true, GrantedBy: 5, EndedBy: 7}}))
	if len(conv) != 2 || conv[0].Return != never || conv[1].Return != never {
		t.Fatalf("bounds before the call used: %+v", conv)
	}
}

// Correct randomized histories with the log's times taken from the same
// serial execution are judged Ok; a refusal planted after the last hold
// ended is judged Illegal. Seeded; the seed is logged.
func TestLogBoundsJudgeSerialHistories(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for round := 0; round < 50; round++ {
		// One mutex, serial holds: each either known (ok acquire, ok
		// unlock) or not (an acquire that timed out, whose grant and end
		// the log recorded; or an unlock that timed out, whose end it
		// recorded).
		var ops []Op
		facts := map[string]LogOutcome{}
		t0 := int64(0)
		for i := 0; i < 8; i++ {
			owner := fmt.Sprintf("o%d", i)
			switch rng.IntN(3) {
			case 0:
				ops = append(ops, Op{Client: i, Kind: OpLock, Name: "x", Owner: owner, Start: t0, End: t0 + 3, Outcome: OK},
					Op{Client: i, Kind: OpUnlock, Name: "x", Owner: owner, Start: t0 + 4, End: t0 + 6, Outcome: OK, HeldFrom: t0 + 3})
			case 1:
				ops = append(ops, Op{Client: i, Kind: OpLock, Name: "x", Owner: owner, Start: t0, End: t0 + 100, Outcome: Unknown})
				facts[owner] = LogOutcome{Granted: true, GrantedBy: t0 + 3, EndedBy: t0 + 6}
			default:
				ops = append(ops, Op{Client: i, Kind: OpLock, Name: "x", Owner: owner, Start: t0, End: t0 + 3, Outcome: OK},
					Op{Client: i, Kind: OpUnlock, Name: "x", Owner: owner, Start: t0 + 4, End: t0 + 100, Outcome: Unknown, HeldFrom: t0 + 3})
				facts[owner] = LogOutcome{Granted: true, GrantedBy: t0 + 2, EndedBy: t0 + 6}
			}
			if rng.IntN(4) == 0 { // a refused try while this one held
				ops = append(ops, Op{Client: 100 + i, Kind: OpTryLock, Name: "x", Owner: owner + "-try", Start: t0 + 3, End: t0 + 4,
					Outcome: Locked})
			}
			t0 += 10
		}
		rng.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
		if res, _ := CheckCatalogue(ops, logFacts(facts), 10*time.Second); res != porcupine.Ok {
			t.Fatalf("round %d: a correct serial history judged %s", round, res)
		}
		stale := append(slices.Clone(ops), Op{Client: 99, Kind: OpTryLock, Name: "x", Owner: "late", Start: t0 + 200, End: t0 + 201,
			Outcome: Locked})
		if res, _ := CheckCatalogue(stale, logFacts(facts), 10*time.Second); res != porcupine.Illegal {
			t.Fatalf("round %d: a refusal after every hold ended judged %s, want Illegal", round, res)
		}
	}
}
