// Command soak runs the lockraft fault checker for a while per fault kind and
// prints a table: fault kind, operations, violations, longest unavailability.
//
//	go run ./chaos/cmd/soak -seed 7 -duration 60s -faults partition,crash,pause,clock
//
// Each comma-separated fault gets its own fresh cluster and -duration of
// workload (a group such as "partition" mixes its kinds in one run). Each
// violation is printed to stderr as it is found and again after the table;
// the exit status is 1 if any run found one.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lockraft/lockraft/chaos"
	"github.com/lockraft/lockraft/node"
)

func main() {
	chaos.MaybeChild() // hidden: this binary re-executed as one node process (-procs)
	seed := flag.Uint64("seed", uint64(time.Now().UnixNano()), "RNG seed (printed; rerun with it)")
	dur := flag.Duration("duration", 60*time.Second, "workload duration per fault")
	faults := flag.String("faults", "partition,crash,pause,clock,net,msgs,disk", "comma-separated runs, each a fault group (partition, crash, pause, clock, wall, badclock, net, msgs, disk, churn, churn-light, leader-churn) or kind (isolate-leader, wall-back, ...), or kinds and groups joined by + into one run (wall-back+isolate-leader); with -procs: kill, stop, partition, or kinds joined by +")
	sizes := flag.String("nodes", "0", "cluster size (0: 3, or 5 for leader-churn); a comma-separated list runs every fault at each size (-faults leader-churn -nodes 3,5)")
	clients := flag.Int("clients", 3, "clients per node")
	longHolds := flag.Float64("long-holds", 0, "share of critical sections held for up to 4 s (twice the session TTL) instead of 20 ms: a holder told of its loss late then shows as a live overlap (S5)")
	verbose := flag.Bool("v", false, "log every fault")
	leaderClock := flag.Bool("leader-clock", false, "let the badclock faults (clock-jump, clock-rate) hit the leader (outside the clock-rate assumption: porcupine may flag S5 losses; fencing must still hold); the clock group's faults hit any node anyway")
	nodeLog := flag.String("nodelog", "", "write the nodes' logs (slog text, info level) to this file")
	procs := flag.Bool("procs", false, "multi-process mode: each node its own OS process; faults kill, stop, partition (netns)")
	prims := flag.String("primitives", "mutex", "comma-separated primitives the clients drive, each operation picking one: mutex, rw, semaphore, election, multi, or all (with election, observers on every node check Observe)")
	ttl := flag.Duration("ttl", 0, "session TTL of the in-process nodes (0: the checker's 2 s); e.g. 10s to give restarted members time to come back while their old session is still alive (restarted-waiter)")
	histDir := flag.String("history", "", "write each run's history (gob) to this directory before the end checks, as FAULT-seed-SEED.gob, to study the checker offline (chaos.LoadHistory)")
	flag.Parse()
	logf := func(string, ...any) {}
	if *verbose {
		logf = log.Printf
	}
	var logger *slog.Logger
	if *nodeLog != "" {
		f, err := os.Create(*nodeLog)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		logger = slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	var sizeList []int
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			log.Fatalf("-nodes: %q is not a cluster size", f)
		}
		sizeList = append(sizeList, n)
	}
	fmt.Printf("seed %d, %v per fault, %v nodes (0: the fault's default) x %d clients\n", *seed, *dur, sizeList, *clients)
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\toperations\tgrants\tviolations\tlongest unavailability\tporcupine\tstale rejected\tlive overlaps (S5)\tinjected\tper primitive\tobserved")
	var violations []string // printed again after the table, so the end of the output has them
	var failovers []failoverRow
	for _, run := range runs(strings.Split(*faults, ","), sizeList) {
		f, size := run.fault, run.size
		var rep *chaos.Report
		var err error
		if *procs {
			kinds := strings.Split(f, "+") // kill+stop mixes kinds in one run
			rep, err = chaos.RunProcs(context.Background(), chaos.ProcsConfig{Seed: *seed, Duration: *dur, Faults: kinds,
				Size: size, Clients: *clients, Logf: logf, CheckTimeout: 5 * time.Minute})
			f = "procs:" + f
			if size != 0 {
				f = fmt.Sprintf("%s/%d", f, size)
			}
		} else {
			kinds, xerr := chaos.ExpandFaults(f)
			if xerr != nil {
				log.Fatal(xerr)
			}
			wl := chaos.DefaultWorkload()
			wl.ClientsPerNode = *clients
			if *prims == "all" {
				wl.Primitives = chaos.AllPrimitives
			} else {
				wl.Primitives = strings.Split(*prims, ",")
			}
			for _, p := range wl.Primitives {
				if !slices.Contains(chaos.AllPrimitives, p) {
					log.Fatalf("unknown primitive %q (want %v or all)", p, chaos.AllPrimitives)
				}
			}
			wl.LongHoldShare, wl.LongHold = *longHolds, 4*time.Second
			var histFile string
			if *histDir != "" {
				histFile = filepath.Join(*histDir, fmt.Sprintf("%s-seed-%d.gob", f, *seed))
			}
			var tune func(*node.Config)
			if *ttl > 0 {
				tune = func(c *node.Config) { c.SessionTTL = *ttl }
			}
			rep, err = chaos.Run(context.Background(), chaos.RunConfig{Seed: *seed, Duration: *dur, Faults: kinds, Size: size, LeaderClock: *leaderClock,
				Workload: wl, Logf: logf, Logger: logger, CheckTimeout: 5 * time.Minute, HistoryFile: histFile, Tune: tune})
			if size != 0 {
				f = fmt.Sprintf("%s/%d", f, size)
			}
		}
		if err != nil {
			log.Fatalf("%s: %v", f, err)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%v\t%s\t%d\t%d\t%v\t%v\t%d\n", f, rep.Ops, rep.Grants, len(rep.Violations),
			rep.LongestGap.Round(time.Millisecond), rep.Linearizable, rep.Stale, rep.Live, rep.Injected, rep.OpsByPrim, rep.Observed)
		for _, v := range rep.Violations {
			line := fmt.Sprintf("VIOLATION [%s seed %d]: %s", f, *seed, v)
			fmt.Fprintln(os.Stderr, line)
			violations = append(violations, line)
		}
		for _, n := range rep.Notes {
			fmt.Fprintf(os.Stderr, "note [%s]: %s\n", f, n)
		}
		if rep.Failover != nil {
			failovers = append(failovers, failoverRow{f, rep.Failover})
		}
	}
	tw.Flush()
	printFailovers(failovers)
	for _, v := range violations {
		fmt.Println(v)
	}
	if len(violations) > 0 {
		os.Exit(1)
	}
}

// run is one fault at one cluster size.
type run struct {
	fault string
	size  int
}

// runs is every fault at every size.
func runs(faults []string, sizes []int) []run {
	var out []run
	for _, f := range faults {
		for _, n := range sizes {
			out = append(out, run{f, n})
		}
	}
	return out
}

type failoverRow struct {
	run string
	s   *chaos.FailoverSummary
}

// printFailovers prints what the leader kills cost, one row per
// leader-churn run (chaos.FailoverSummary).
func printFailovers(rows []failoverRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Println()
	fmt.Println("leader kills (p50 / p99 / max); dead holds: a killed member's session's holds, death → release (the next waiter's grant)")
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "run\tmembers\tET\tTTL\tkills\tleaderless\tkill → next grant anywhere\tdead holds\tdeath → release\tworst − leaderless − TTL")
	for _, r := range rows {
		s := r.s
		fmt.Fprintf(tw, "%s\t%d\t%v\t%v\t%d\t%v\t%v\t%d\t%v\t%v\n", r.run, s.Members, s.ET, s.TTL, s.Kills, s.Leaderless, s.NoGrant,
			s.DeadHolds, s.Freed, s.Over.Round(time.Millisecond))
	}
	tw.Flush()
}
