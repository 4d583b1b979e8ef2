package chaos

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"testing/cryptotest"
	"testing/synctest"
)

// RunSim runs rc as a deterministic simulation: every node on the in-memory
// network (internal/simnet) inside a testing/synctest bubble, whose fake
// clock advances only when every goroutine waits, with crypto/rand (raft's
// election timeouts) seeded from rc.Seed and one P. Every choice the run
// makes — the network's delays and losses, the faults, the clients'
// operations, raft's timeouts — comes from the seed, and nothing happens
// at the same instant on two members; its network trace (Report.Trace)
// fingerprints the schedule. The same seed gives the same schedule in most
// runs and the same outcome. Where it does not, the cause is the one thing
// the seed cannot reach: the order in which the Go scheduler runs
// goroutines woken together, which a system call (an fsync) that outlasts
// the scheduler's patience can change. The race detector randomises
// scheduling, so under -race a run is a valid run but not a replay.
//
// It changes GOMAXPROCS for its duration and must not run in parallel with
// other tests.
func RunSim(t *testing.T, rc RunConfig) (*Report, error) {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	var rep *Report
	var err error
	synctest.Test(t, func(t *testing.T) {
		cryptotest.SetGlobalRandom(t, rc.Seed)
		rc.Sim, rc.checkLater = true, true
		if rc.BaseDir == "" {
			rc.BaseDir = t.TempDir()
		}
		rep, err = Run(context.Background(), rc)
	})
	if rep != nil && rep.checkLater != nil {
		rep.checkLater()
		rep.checkLater = nil
		slices.Sort(rep.Notes)
	}
	return rep, err
}
