package main

import (
	"os"
	"strings"
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

// TestQuickSeedSystems runs S1 and S3 briefly against each of the seeds'
// systems (MariaDB lock table and FOR UPDATE, ZooKeeper with the Curator
// recipe, the Redisson-style watchdog): it checks that each works as a
// lock (S3 counts overlapping critical sections: S1 of the promises, as a
// peer would have to keep it) and reports figures, not how fast. Skipped,
// naming the package, where a server is not installed.
func TestQuickSeedSystems(t *testing.T) {
	for _, name := range []string{"mysql-lock-table", "mysql-for-update", "zookeeper", "redisson-watchdog"} {
		t.Run(name, func(t *testing.T) {
			f := factories[name]
			if err := f.available(); err != nil {
				t.Skip(err)
			}
			cfg := defaultConfig(true)
			cfg.s1Pairs, cfg.s1Max, cfg.s3Dur = 20, 10*time.Second, 500*time.Millisecond
			sys, err := f.start(t.TempDir(), cfg.ttl)
			if err != nil {
				t.Fatal(err)
			}
			defer sys.stop()
			rep := newReport("")
			if err := runS1(cfg, name, sys, 1, rep); err != nil {
				t.Fatal(err)
			}
			if err := runS3(cfg, name, sys, 1, rep); err != nil {
				t.Fatal(err)
			}
			got := map[string]float64{}
			for _, r := range rep.rows {
				got[r.Scenario+"/"+r.Metric] = r.Value
			}
			if got["S1/pairs_per_s"] <= 0 || got["S3/grants_per_s"] <= 0 {
				t.Errorf("no progress: %v", got)
			}
			if v := got["S3/mutual_exclusion_violations"]; v > 0 {
				t.Errorf("%v overlapping critical sections", v)
			}
		})
	}
}

// TestQuickCatalogue runs the catalogue's scenarios (C1–C4) briefly against
// lockraft and, where it has the primitive, etcd: it checks that they work
// and that no system broke its primitive (readers beside the writer,
// permits over the size, two holders of a name), not how fast.
func TestQuickCatalogue(t *testing.T) {
	for _, name := range []string{"lockraft", "etcd"} {
		t.Run(name, func(t *testing.T) {
			f := factories[name]
			cfg := defaultConfig(true)
			cfg.s3Dur = 700 * time.Millisecond
			cfg.scenarios = map[string]bool{"C1": true, "C2": true, "C3": true, "C4": true}
			sys, err := f.start(t.TempDir(), cfg.ttl)
			if err != nil {
				t.Fatal(err)
			}
			rep := newReport("")
			runCatalogue(cfg, name, sys, 1, rep)
			sys.stop()
			runC3(cfg, f, t.TempDir(), 1, rep)
			if len(rep.fails) > 0 {
				t.Fatal(rep.fails)
			}
			got := map[string]float64{}
			for _, r := range rep.rows {
				got[r.Scenario+"/"+r.Metric] = r.Value
			}
			want := []string{"C1/grants_per_s", "C1/writer_grants_per_s", "C3/crash_to_new_leader_observed_ms", "C4/lockall_per_s"}
			if name == "lockraft" {
				want = append(want, "C2/acquisitions_per_s")
			}
			for _, m := range want {
				if got[m] <= 0 {
					t.Errorf("%s = %v, want > 0", m, got[m])
				}
			}
			for _, m := range []string{"C1/exclusion_violations", "C2/over_limit_violations", "C4/exclusion_violations"} {
				if got[m] > 0 {
					t.Errorf("%s = %v", m, got[m])
				}
			}
			if v := got["C2/most_permits_in_use"]; v > 8 {
				t.Errorf("%v permits in use of 8", v)
			}
			rep.printTable(os.Stderr)
		})
	}
}

// TestQuickPrimitives runs scenario P briefly: lockraft reports S1 and S2
// for each primitive, the table sets them beside Lock, and a system without
// the primitives (etcd's callers) runs none of it rather than failing.
func TestQuickPrimitives(t *testing.T) {
	for _, name := range []string{"lockraft", "etcd"} {
		t.Run(name, func(t *testing.T) {
			cfg := defaultConfig(true)
			cfg.s1Pairs, cfg.s2Dur = 30, 300*time.Millisecond
			cfg.scenarios = map[string]bool{"S1": true, "S2": true, "P": true}
			sys, err := factories[name].start(t.TempDir(), cfg.ttl)
			if err != nil {
				t.Fatal(err)
			}
			defer sys.stop()
			rep := newReport("")
			if err := runS1(cfg, name, sys, 1, rep); err != nil {
				t.Fatal(err)
			}
			if err := runS2(cfg, name, sys, 1, rep); err != nil {
				t.Fatal(err)
			}
			runPrimitives(cfg, name, sys, 1, rep)
			if len(rep.fails) > 0 {
				t.Fatal(rep.fails)
			}
			got := map[string]float64{}
			for _, r := range rep.rows {
				got[r.Scenario+"/"+r.Metric] = r.Value
			}
			for _, p := range primitives {
				for _, m := range []string{"S1 " + p.name + "/pair_p50_ms", "S2 " + p.name + "/pairs_per_s"} {
					if name == "lockraft" && got[m] <= 0 {
						t.Errorf("%s = %v, want > 0", m, got[m])
					}
					if name != "lockraft" && got[m] != 0 {
						t.Errorf("%s ran on %s, whose callers lack it", m, name)
					}
				}
			}
			var out strings.Builder
			rep.printTable(&out)
			if has := strings.Contains(out.String(), "| "+name+" | lockall3 |"); has != (name == "lockraft") {
				t.Errorf("primitives table for %s: row present %v\n%s", name, has, out.String())
			}
		})
	}
}
