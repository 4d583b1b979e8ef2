package main

import (
	"fmt"
	"io"
	"runtime"
	"text/tabwriter"
	"time"
)

// report is what the phases measured, printed as one table at the end.
type report struct {
	command          string
	fleet            string
	loadFrom, loadTo string // the machine's load averages before and after
	rows             []row
}

// row is one line of the table: the phase (empty under its first row),
// what was measured, the figure, and what to compare it with.
type row struct{ phase, measure, value, note string }

// add appends a row.
func (r *report) add(phase, measure, value, note string) {
	r.rows = append(r.rows, row{phase, measure, value, note})
}

// print writes the table.
func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "\n== lockraft fleet: %s, on %d CPUs\n", r.fleet, runtime.NumCPU())
	fmt.Fprintf(w, "   LAN gossip timing, ticks %v, session TTL %v (keepalive every %v), VoterPolicy{MaxVoters: %d, MaxLearners: %d}\n",
		tick, sessionTTL, keepaliveInterval, founderCount, *flagLearners)
	fmt.Fprintf(w, "command: %s\n", r.command)
	fmt.Fprintf(w, "load average (1, 5, 15 min): before %s; after %s\n\n", r.loadFrom, r.loadTo)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "phase\tmeasure\tvalue\tcompare with")
	fmt.Fprintln(tw, "-----\t-------\t-----\t------------")
	for i, x := range r.rows {
		if i > 0 && x.phase != "" {
			fmt.Fprintln(tw, "\t\t\t")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", x.phase, x.measure, x.value, x.note)
	}
	tw.Flush()
}

// dur formats a duration for the table: milliseconds below 10 s.
func dur(d time.Duration) string {
	switch {
	case d < 10*time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	case d < 10*time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(100 * time.Millisecond).String()
	}
}
