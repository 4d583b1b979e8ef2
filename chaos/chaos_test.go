package chaos

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"
)

// seed is CHAOS_SEED or a fixed default, logged so a failure can be rerun.
func seed(t *testing.T) uint64 {
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	return 1
}

func runDur() time.Duration {
	if testing.Short() {
		return 3 * time.Second
	}
	return 6 * time.Second
}

func runKinds(t *testing.T, kinds ...string) *Report {
	t.Helper()
	s := seed(t)
	rep, err := Run(context.Background(), RunConfig{
		Seed: s, Duration: runDur(), Faults: kinds, BaseDir: t.TempDir(), Logf: t.Logf,
		CheckTimeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed=%d faults=%v ops=%d determinate=%d grants=%d entries=%d porcupine=%s writes=%d stale=%d accepted-overlaps=%d live-overlaps=%d longest-gap=%v injected=%v",
		rep.Seed, kinds, rep.Ops, rep.Determinate, rep.Grants, rep.Entries, rep.Linearizable, rep.Writes, rep.Stale, rep.Accepted, rep.Live, rep.LongestGap, rep.Injected)
	for _, n := range rep.Notes {
		t.Logf("note: %s", n)
	}
	for _, v := range rep.Violations {
		t.Errorf("violation (rerun with CHAOS_SEED=%d go test ./chaos/ -run '%s'): %s", s, t.Name(), v)
	}
	if rep.Grants == 0 {
		t.Errorf("no grants at all: the workload did not run")
	}
	return rep
}

func TestNoFaults(t *testing.T)          { runKinds(t) }
func TestPartitionMajority(t *testing.T) { runKinds(t, FaultPartitionMajority) }
func TestIsolateLeader(t *testing.T)     { runKinds(t, FaultIsolateLeader) }
func TestOneWay(t *testing.T)            { runKinds(t, FaultOneWay) }
func TestBridge(t *testing.T)            { runKinds(t, FaultBridge) }
func TestCrashRestart(t *testing.T)      { runKinds(t, FaultCrash) }
func TestPause(t *testing.T)             { runKinds(t, FaultPause) }
func TestClockJump(t *testing.T)         { runKinds(t, FaultClockJump) }
func TestClockRate(t *testing.T)         { runKinds(t, FaultClockRate) }
func TestNetDelayAndResets(t *testing.T) { runKinds(t, FaultNet) }

func TestMessageDropDuplicateReorder(t *testing.T) {
	t.Skip("needs a per-message hook in node.Faults (e.g. Faults.Filter func(from, to uint64, m *raftpb.Message) (deliver int, delay time.Duration)) to drop, duplicate or reorder single raft messages; whole-connection resets and delays are covered by TestNetDelayAndResets")
}

func TestMembershipChurn(t *testing.T) {
	t.Skip("needs the membership package's AddVoter/RemoveVoter on node (being built concurrently)")
}

func TestStorageFaults(t *testing.T) {
	t.Skip("needs a write/fsync failure hook under raftlog and lockfsm (e.g. raftlog.Options.BeforeSync func() error, lockfsm.Options.BeforeCommit func() error, exposed through node.Config)")
}
