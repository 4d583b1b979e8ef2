// Command bench measures lockraft side by side with etcd (concurrency.Mutex
// on an embedded 3-member cluster), Redis (SET NX PX + Lua compare-and-delete,
// default persistence and appendfsync always), Redlock (redsync over 3
// redis-servers), a Redisson-style watchdog lock on Redis, MariaDB (a lock
// table with an expiry column; SELECT … FOR UPDATE) and ZooKeeper (a
// 3-server ensemble, Curator's lock recipe), in one run on one machine,
// everything on loopback. Servers come from Debian's packages (redis-server,
// mariadb-server, zookeeper); a system whose package is missing is skipped
// with a message naming it.
//
//	go run . -quick -json out.jsonl   # about a minute and a quarter
//	go run . -json out.jsonl          # full, under 10 minutes
//
// The lock catalogue's scenarios (catalogue.go) run with -scenarios
// C1,C2,C3,C4 (read-write lock, semaphore, election failover, LockAll).
// Scenario P (in the default set) repeats S1 and S2 with RLock, a
// semaphore's Acquire and LockAll of 3 names on the systems that have them
// (primitives.go).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"syscall"

	"github.com/lockraft/lockraft/internal/sqlserver"
)

func main() {
	var cfg config
	quick := flag.Bool("quick", false, "short scenarios (about a minute and a quarter in all)")
	jsonPath := flag.String("json", "", "write JSON lines (system, scenario, metric, value, run) to this file")
	systems := flag.String("systems", "lockraft,etcd,redis,redis-aof-always,redlock,redisson-watchdog,mysql-lock-table,mysql-for-update,zookeeper", "comma-separated systems to run")
	scenarios := flag.String("scenarios", "S1,S2,P,S3,S4,S5", "comma-separated scenarios to run (S1–S5; P: S1 and S2 with the catalogue's primitives; the catalogue's C1–C4)")
	runs := flag.Int("runs", 2, "interleaved runs per system")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	tracePath := flag.String("trace", "", "write a runtime execution trace of the whole run to this file")
	flag.Parse()

	cfg = defaultConfig(*quick)
	cfg.runs = *runs
	cfg.scenarios = map[string]bool{}
	for _, s := range strings.Split(*scenarios, ",") {
		cfg.scenarios[strings.TrimSpace(s)] = true
	}

	root, err := os.MkdirTemp("", "lockraft-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cfg.tmp = root
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		sqlserver.StopAll()
		os.RemoveAll(root)
		os.Exit(130)
	}()

	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			pprof.StartCPUProfile(f)
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}

	if *tracePath != "" {
		f, err := os.Create(*tracePath)
		if err == nil && trace.Start(f) == nil {
			defer func() { trace.Stop(); f.Close() }()
		}
	}

	rep := newReport(*jsonPath)
	rep.host = describeHost(root)
	fmt.Fprint(os.Stderr, rep.host.String())

	var sys []systemFactory
	for _, name := range strings.Split(*systems, ",") {
		f, ok := factories[strings.TrimSpace(name)]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown system %q\n", name)
			continue
		}
		if err := f.available(); err != nil {
			fmt.Fprintf(os.Stderr, "skipping %s: %v\n", name, err)
			continue
		}
		sys = append(sys, f)
	}
	for run := 1; run <= cfg.runs; run++ {
		for _, f := range sys {
			runSystem(cfg, f, run, rep)
		}
		if cfg.overlapWaits {
			runWaitsTogether(cfg, sys, run, rep)
		}
	}
	rep.host.loadEnd = loadAvg()
	rep.printTable(os.Stdout)
	sqlserver.StopAll()
	os.RemoveAll(root)
	if err := rep.close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
