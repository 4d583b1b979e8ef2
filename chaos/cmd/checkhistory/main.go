// Command checkhistory re-runs the fault checker's linearizability check
// (porcupine, the catalogue model) over histories the soak saved with
// -history, and reports each one's size, result, time and the process's
// peak RSS. For studying the checker offline:
//
//	go run ./chaos/cmd/soak -seed 62 -primitives all -faults leader-churn -history /tmp/h
//	go run ./chaos/cmd/checkhistory /tmp/h/leader-churn-seed-62.gob
package main

import (
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/lockraft/lockraft/chaos"
)

func main() {
	timeout := flag.Duration("timeout", 5*time.Minute, "porcupine's bound per history")
	open := flag.Bool("open", false, "ignore the log's times: leave undetermined operations' intervals open (the checker before the bounds)")
	each := flag.Bool("partitions", false, "check each partition (a name, a multi-name group) on its own and report it")
	verbose := flag.Bool("verbose", false, "keep the partial linearizations a visualization needs (as the soak does on a violation)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: checkhistory [-timeout D] FILE.gob...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	for _, path := range flag.Args() {
		h, err := chaos.LoadHistory(path)
		if err != nil {
			log.Fatalf("%s: %v", path, err)
		}
		granted := h.Outcomes()
		if *open {
			granted = func(owner string) chaos.LogOutcome { return chaos.LogOutcome{Granted: h.Outcomes()(owner).Granted} }
		}
		st := chaos.HistoryStats(h.Ops, granted)
		if *each {
			checkEach(h.Ops, granted, *timeout)
		}
		start := time.Now()
		var res porcupine.CheckResult
		if *verbose {
			res, _ = chaos.CheckCatalogue(h.Ops, granted, *timeout)
		} else {
			res = chaos.CheckCatalogueResult(h.Ops, granted, *timeout)
		}
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		fmt.Printf("%s: %d ops, %s; porcupine %v in %v; peak RSS %d MiB\n", path, len(h.Ops), st,
			res, time.Since(start).Round(time.Millisecond), ru.Maxrss/1024)
	}
}

// checkEach checks every partition alone, one at a time.
func checkEach(ops []chaos.Op, granted chaos.Outcomes, timeout time.Duration) {
	by := map[string][]porcupine.Operation{}
	var keys []string
	for _, p := range chaos.ToPorcupineCatalogue(ops, granted) {
		k := p.Metadata.(string)
		if by[k] == nil {
			keys = append(keys, k)
		}
		by[k] = append(by[k], p)
	}
	slices.Sort(keys)
	for _, k := range keys {
		pending := 0
		for _, p := range by[k] {
			if p.Return == math.MaxInt64 {
				pending++
			}
		}
		start := time.Now()
		res := porcupine.CheckOperationsTimeout(chaos.CatalogueModel(), by[k], timeout)
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		fmt.Printf("  %-8s %5d operations, %3d never return: %v in %v (peak RSS so far %d MiB)\n", k, len(by[k]), pending, res,
			time.Since(start).Round(time.Millisecond), ru.Maxrss/1024)
	}
}
