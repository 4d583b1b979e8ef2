// Command ab compares two builds of a Go benchmark on a noisy machine: it
// runs two test binaries in alternated rounds (A, B, A, B, ...) with the
// same arguments and prints, per reported metric, the median of each, B/A,
// and in how many rounds B's figure was the higher one. Single runs on a
// shared two-core machine move by 15-30 %; alternating and counting wins is
// what tells a real change from noise.
//
//	go test -c -o /tmp/a.test ./node/     # at the base commit
//	go test -c -o /tmp/b.test ./node/     # with the change
//	cd bench && go run ./cmd/ab -a /tmp/a.test -b /tmp/b.test -rounds 8 -- \
//	    -test.run '^$' -test.bench 'ParallelPairs64/log=wal' -test.benchtime 30000x
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

func main() {
	a := flag.String("a", "", "the base test binary")
	b := flag.String("b", "", "the changed test binary")
	rounds := flag.Int("rounds", 6, "alternated rounds")
	flag.Parse()
	if *a == "" || *b == "" || *rounds < 1 {
		fmt.Fprintln(os.Stderr, "usage: ab -a A.test -b B.test [-rounds N] -- <test binary flags>")
		os.Exit(2)
	}
	args := flag.Args()
	vals := map[string]map[string][]float64{"A": {}, "B": {}}
	for r := 0; r < *rounds; r++ {
		for _, side := range []string{"A", "B"} {
			bin := *a
			if side == "B" {
				bin = *b
			}
			out, err := exec.Command(bin, args...).CombinedOutput()
			if err != nil {
				fmt.Fprintf(os.Stderr, "round %d %s: %v\n%s", r+1, side, err, out)
				os.Exit(1)
			}
			for unit, v := range metricsOf(out) {
				vals[side][unit] = append(vals[side][unit], v)
			}
		}
	}
	units := make([]string, 0, len(vals["A"]))
	for u := range vals["A"] {
		units = append(units, u)
	}
	slices.Sort(units)
	fmt.Printf("%-14s %12s %12s %7s  %s\n", "metric", "median A", "median B", "B/A", "B higher in")
	for _, u := range units {
		va, vb := vals["A"][u], vals["B"][u]
		if len(vb) != len(va) {
			continue
		}
		wins := 0
		for i := range va {
			if vb[i] > va[i] {
				wins++
			}
		}
		ma, mb := median(va), median(vb)
		fmt.Printf("%-14s %12.4g %12.4g %7.3f  %d of %d rounds\n", u, ma, mb, mb/ma, wins, len(va))
	}
}

// metricsOf returns the metrics of the last benchmark result line in out
// ("BenchmarkX-2  N  v1 unit1  v2 unit2 ..."), by unit. A benchmark that
// prints while it runs gets its figures on a line of their own ("N  v1
// unit1 ..."); those count too.
func metricsOf(out []byte) map[string]float64 {
	var last map[string]float64
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && strings.HasPrefix(f[0], "Benchmark") {
			f = f[1:]
		}
		if len(f) < 3 || len(f)%2 == 0 {
			continue
		}
		if _, err := strconv.Atoi(f[0]); err != nil {
			continue // a benchmark's name alone on a line, or its log
		}
		m := map[string]float64{}
		for i := 1; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			m[f[i+1]] = v
		}
		last = m
	}
	return last
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
