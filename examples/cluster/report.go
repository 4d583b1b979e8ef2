package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// progressLoop prints one line per interval until ctx ends.
func progressLoop(ctx context.Context, w io.Writer, snap func() (Snapshot, error), every time.Duration, extra func() string) {
	start := time.Now()
	prevOps := 0
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s, err := snap()
		if err != nil {
			continue
		}
		ops, handoffs, sold := s.Totals()
		var holders []string
		for _, k := range sortedKeys(s) {
			h := "-"
			if st := s.SKUs[k]; st.LastNode != 0 {
				h = fmt.Sprintf("n%d", st.LastNode)
			}
			holders = append(holders, k+"@"+h)
		}
		line := fmt.Sprintf("%5.1fs  ops %5d (+%4d)  sold %4d  handoffs %4d  leader n%d  holder %s",
			time.Since(start).Seconds(), ops, ops-prevOps, sold, handoffs, s.Leader, strings.Join(holders, " "))
		if extra != nil {
			line += "  " + extra()
		}
		fmt.Fprintln(w, line)
		prevOps = ops
	}
}

func sortedKeys(s Snapshot) []string {
	keys := make([]string, 0, len(s.SKUs))
	for k := range s.SKUs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// result prints the table and returns the broken invariants, if any.
func result(w io.Writer, s Snapshot, elapsed time.Duration) []string {
	var bad []string
	fmt.Fprintf(w, "\n%-8s %8s %6s %6s %9s %15s %15s %9s\n", "sku", "initial", "sold", "final", "overlaps", "stale-accepted", "stale-rejected", "handoffs")
	for _, k := range sortedKeys(s) {
		st := s.SKUs[k]
		fmt.Fprintf(w, "%-8s %8d %6d %6d %9d %15d %15d %9d\n", k, st.Initial, st.Sold, st.Stock, st.Overlaps, st.StaleAccepted, st.Rejected, st.Handoffs)
		if st.Stock != st.Initial-st.Sold {
			bad = append(bad, fmt.Sprintf("%s: final %d != initial %d - sold %d", k, st.Stock, st.Initial, st.Sold))
		}
		if st.Stock < 0 || st.Sold > st.Initial {
			bad = append(bad, fmt.Sprintf("%s: oversold (final %d, sold %d of %d)", k, st.Stock, st.Sold, st.Initial))
		}
		if st.Stock != 0 {
			bad = append(bad, fmt.Sprintf("%s: not sold out (final %d)", k, st.Stock))
		}
		if st.Overlaps != 0 {
			bad = append(bad, fmt.Sprintf("%s: %d overlapping critical sections (max %d inside)", k, st.Overlaps, st.MaxInside))
		}
		if st.SalesLogged != st.Sold {
			bad = append(bad, fmt.Sprintf("%s: %d sales counted, %d in the sales log", k, st.Sold, st.SalesLogged))
		}
		if st.StaleAccepted != 0 || st.BadWrites != 0 {
			bad = append(bad, fmt.Sprintf("%s: %d stale writes accepted, %d lost/out-of-order updates", k, st.StaleAccepted, st.BadWrites))
		}
	}
	ops, _, sold := s.Totals()
	fmt.Fprintf(w, "(books read back from the %s)\n", s.Store)
	fmt.Fprintf(w, "\n%d lock+unlock critical sections (%d sales) in %.1fs: %.0f ops/s\n", ops, sold, elapsed.Seconds(), float64(ops)/elapsed.Seconds())
	return bad
}
