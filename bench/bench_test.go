package main

import (
	"os"
	"testing"
	"time"
)

// TestQuickS1Lockraft runs S1 against a fresh 3-node lockraft cluster with a
// tiny count: it checks that the benchmark program works, not how fast.
func TestQuickS1Lockraft(t *testing.T) {
	cfg := defaultConfig(true)
	cfg.s1Pairs, cfg.s1Max = 20, 10*time.Second
	sys, err := factories["lockraft"].start(t.TempDir(), cfg.ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer sys.stop()
	rep := newReport("")
	if err := runS1(cfg, "lockraft", sys, 1, rep); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, r := range rep.rows {
		got[r.Metric] = r.Value
	}
	for _, m := range []string{"pair_p50_ms", "pair_p99_ms", "pairs_per_s"} {
		if got[m] <= 0 {
			t.Errorf("%s = %v, want > 0", m, got[m])
		}
	}
	rep.printTable(os.Stderr)
}

func TestFIFOStats(t *testing.T) {
	now := time.Now()
	at := func(ms int) time.Time { return now.Add(time.Duration(ms) * time.Millisecond) }
	// caller 0 asks (1), caller 1 asks (2), 0 granted, 0 re-asks (3) and is
	// granted again before 1: one inversion, one barge.
	gs := []grant{{0, 1, at(0)}, {0, 3, at(5)}, {1, 2, at(1)}}
	inv, inv1, barge := fifoStats(gs)
	if inv != 1 || inv1 != 1 || barge != 1 {
		t.Fatalf("got %d %d %d, want 1 1 1", inv, inv1, barge)
	}
}
