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

// TestMultiProcessKill: three node processes, real kill -9 (restart from the
// data dir) and SIGSTOP/SIGCONT, histories merged in the parent, same checks.
func TestMultiProcessKill(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process mode skipped under -short (it starts OS processes)")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Skipf("cannot re-execute the test binary: %v", err)
	}
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
