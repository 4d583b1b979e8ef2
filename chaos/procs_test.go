package chaos

import (
	"context"
	"os"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	MaybeChild() // node processes of the multi-process mode re-execute the test binary
	os.Exit(m.Run())
}

// childExe is the test binary, which the multi-process mode re-executes as
// its node processes; the test is skipped under -short or when the binary
// cannot be found.
func childExe(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process mode skipped under -short (it starts OS processes)")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Skipf("cannot re-execute the test binary: %v", err)
	}
	return exe
}

// TestMultiProcessKill: three node processes, real kill -9 (restart from the
// data dir) and SIGSTOP/SIGCONT, histories merged in the parent, same checks.
func TestMultiProcessKill(t *testing.T) {
	exe := childExe(t)
	s := seed(t)
	rep, err := RunProcs(context.Background(), ProcsConfig{Seed: s, Duration: 6 * time.Second,
		Faults: []string{ProcKill, ProcStop}, Exe: exe, BaseDir: t.TempDir(), Logf: t.Logf, CheckTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed=%d ops=%d grants=%d entries=%d porcupine=%s writes=%d stale=%d accepted-overlaps=%d live-overlaps=%d longest-gap=%v injected=%v",
		rep.Seed, rep.Ops, rep.Grants, rep.Entries, rep.Linearizable, rep.Writes, rep.Stale, rep.Accepted, rep.Live, rep.LongestGap, rep.Injected)
	for _, n := range rep.Notes {
		t.Logf("note: %s", n)
	}
	for _, v := range rep.Violations {
		t.Errorf("violation (rerun with CHAOS_SEED=%d go test ./chaos/ -run TestMultiProcessKill): %s", s, v)
	}
	if rep.Grants == 0 {
		t.Error("no grants at all: the workload did not run")
	}
	if rep.Injected[ProcKill]+rep.Injected[ProcStop] == 0 {
		t.Error("no fault injected")
	}
}

// runProcsKind runs one multi-process fault kind for d and reports.
func runProcsKind(t *testing.T, kind string, d time.Duration) *Report {
	t.Helper()
	exe := childExe(t)
	s := seed(t)
	// Five node processes under -race beside the other packages' tests on
	// two cores: 500 ms more for the probes' round trips (the soak judges
	// the bound without it).
	rep, err := RunProcs(context.Background(), ProcsConfig{Seed: s, Duration: d, Faults: []string{kind}, Exe: exe,
		BaseDir: t.TempDir(), Logf: t.Logf, CheckTimeout: 20 * time.Second, ExtraProbeSlack: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed=%d ops=%d grants=%d porcupine=%s stale=%d accepted-overlaps=%d live-overlaps=%d injected=%v",
		rep.Seed, rep.Ops, rep.Grants, rep.Linearizable, rep.Stale, rep.Accepted, rep.Live, rep.Injected)
	for _, n := range rep.Notes {
		t.Logf("note: %s", n)
	}
	for _, v := range rep.Violations {
		t.Errorf("violation (rerun with CHAOS_SEED=%d go test ./chaos/ -run '%s'): %s", s, t.Name(), v)
	}
	return rep
}

// TestMultiProcessLeaderChurn (L3, S5): leader-churn on five node processes
// (kill -9, netns where it works) with crashed-holder probes.
func TestMultiProcessLeaderChurn(t *testing.T) {
	rep := runProcsKind(t, ProcLeaderChurn, 12*time.Second)
	if rep.Injected["probes"] == 0 {
		t.Error("no crashed-holder probe completed")
	}
}

// TestMultiProcessRestartHolder (L3): a holder process killed with kill -9 and
// restarted at once from its data directory frees its lock for the next
// waiter within a commit or so of its restart, not at the TTL.
func TestMultiProcessRestartHolder(t *testing.T) {
	rep := runProcsKind(t, ProcRestartHolder, 6*time.Second)
	if rep.Injected[ProcRestartHolder] == 0 {
		t.Error("no restart probe completed")
	}
}

// TestMultiProcessRolling (L1, L3): three gossip-mode node processes
// restarted one after another (graceful Close, start on the same data
// directory and ports) under the workload: every member comes back as
// itself, the voters are the same, no operation of another member fails
// because its session ended or it was removed.
func TestMultiProcessRolling(t *testing.T) {
	rep := runProcsKind(t, ProcRolling, 8*time.Second)
	if rep.Injected[ProcRolling] == 0 {
		t.Error("no member restarted")
	}
}
