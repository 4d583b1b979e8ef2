package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// row is one JSON line.
type row struct {
	System   string  `json:"system"`
	Scenario string  `json:"scenario"`
	Metric   string  `json:"metric"`
	Value    float64 `json:"value"`
	Run      int     `json:"run"`
}

type report struct {
	mu     sync.Mutex // add and fail may be called from concurrent scenarios (-quick)
	host   hostInfo
	rows   []row
	fails  []string
	f      *os.File
	w      *bufio.Writer
	jsonOK bool
}

func newReport(path string) *report {
	r := &report{}
	if path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "json:", err)
		} else {
			r.f, r.w = f, bufio.NewWriter(f)
		}
	}
	return r
}

// addMedianP99 adds the median and the 99th percentile of d, in ms, as
// what_p50_ms and what_p99_ms.
func (r *report) addMedianP99(system, scenario, what string, d []time.Duration, run int) {
	r.add(system, scenario, what+"_p50_ms", ms(pct(d, 0.5)), run)
	r.add(system, scenario, what+"_p99_ms", ms(pct(d, 0.99)), run)
}

// addViolations adds a count of broken promises only when there were some:
// such a row in the report says a system broke one.
func (r *report) addViolations(system, scenario, metric string, n int64, run int) {
	if n > 0 {
		r.add(system, scenario, metric, float64(n), run)
	}
}

func (r *report) add(system, scenario, metric string, v float64, run int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	x := row{system, scenario, metric, v, run}
	r.rows = append(r.rows, x)
	fmt.Fprintf(os.Stderr, "  %-17s %-3s %-26s %12.3f (run %d)\n", system, scenario, metric, v, run)
	if r.w != nil {
		b, _ := json.Marshal(x)
		r.w.Write(append(b, '\n'))
		r.w.Flush()
	}
}

func (r *report) fail(system, what string, run int, err error) {
	if err == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	msg := fmt.Sprintf("%s %s run %d: %v", system, what, run, err)
	fmt.Fprintln(os.Stderr, "FAILED:", msg)
	r.fails = append(r.fails, msg)
}

func (r *report) close() error {
	if r.f == nil {
		return nil
	}
	r.w.Flush()
	return r.f.Close()
}

// printTable prints one row per (scenario, metric): the mean over runs for
// each system (the per-run values are in the JSON lines), then lockraft's
// ratio to each peer.
func (r *report) printTable(w io.Writer) {
	var systems []string
	type key struct{ scen, metric string }
	var keys []key
	sum := map[key]map[string]float64{}
	cnt := map[key]map[string]int{}
	for _, x := range r.rows {
		if !slices.Contains(systems, x.System) {
			systems = append(systems, x.System)
		}
		k := key{x.Scenario, x.Metric}
		if sum[k] == nil {
			sum[k], cnt[k] = map[string]float64{}, map[string]int{}
			keys = append(keys, k)
		}
		sum[k][x.System] += x.Value
		cnt[k][x.System]++
	}
	slices.SortStableFunc(keys, func(a, b key) int { return strings.Compare(a.scen, b.scen) })
	var ours, peers []string // ours: lockraft and lockraft-mtls
	for _, s := range systems {
		if isLockraft(s) {
			ours = append(ours, s)
		} else {
			peers = append(peers, s)
		}
	}
	fmt.Fprintf(w, "\n%s", r.host.String())
	fmt.Fprintf(w, "load average at end: %s\n\n", r.host.loadEnd)
	hdr := "| scenario | metric |"
	sep := "|---|---|"
	for _, s := range systems {
		hdr += " " + s + " |"
		sep += "---:|"
	}
	for _, o := range ours {
		for _, p := range peers {
			hdr += " " + o + "/" + p + " |"
			sep += "---:|"
		}
	}
	fmt.Fprintln(w, hdr)
	fmt.Fprintln(w, sep)
	for _, k := range keys {
		line := fmt.Sprintf("| %s | %s |", k.scen, k.metric)
		for _, s := range systems {
			if c := cnt[k][s]; c > 0 {
				line += " " + num(sum[k][s]/float64(c)) + " |"
			} else {
				line += " – |"
			}
		}
		for _, o := range ours {
			for _, p := range peers {
				lc, pc := cnt[k][o], cnt[k][p]
				if lc == 0 || pc == 0 || sum[k][p] == 0 {
					line += " – |"
					continue
				}
				line += fmt.Sprintf(" %.2f× |", (sum[k][o]/float64(lc))/(sum[k][p]/float64(pc)))
			}
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w, "\nvalues: mean over runs; ratio = lockraft ÷ peer (for *_per_s higher is better, for *_ms, cpu_us_per_pair and allocs_per_pair lower is better).")
	fmt.Fprintln(w, "cpu_us_per_pair (S2): the whole process for the systems that run in it (lockraft, etcd: three members and the callers); a server's own process for Redis.")
	r.printPrimitives(w, func(system, scen, metric string) (float64, bool) {
		k := key{scen, metric}
		if c := cnt[k][system]; c > 0 {
			return sum[k][system] / float64(c), true
		}
		return 0, false
	})
	if len(r.fails) > 0 {
		fmt.Fprintln(w, "\nfailures:")
		for _, f := range r.fails {
			fmt.Fprintln(w, "-", f)
		}
	}
}

// isLockraft: one of the lockraft systems (plaintext or mutual TLS), whose
// ratios to the peers the table prints.
func isLockraft(system string) bool {
	return system == "lockraft" || strings.HasPrefix(system, "lockraft-")
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100 || v <= -100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10 || v <= -10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}
