package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
)

// The catalogue's primitives on the hot path (-scenarios P, in the default
// set): S1 and S2 again with each primitive in place of Lock+Unlock, on the
// same system right after its own S1 and S2, and reported as scenarios
// "S1 <primitive>" and "S2 <primitive>":
//
//	rlock     RLock+RUnlock of a fresh name (a shared hold of a read-write lock)
//	semaphore Acquire+Release of 1 permit of a fresh 8-permit semaphore
//	lockall3  LockAll of 3 fresh names, and its release
//
// Only systems whose callers have the primitive run it (lockraft's, with
// and without mutual TLS). The table then sets each beside the same
// system's Lock (printPrimitives): the aim is each within 1.3× of Lock.
var primitives = []struct {
	name string
	lock lockFn
}{
	{"rlock", func(ctx context.Context, c caller, name string) (func(context.Context) error, error) {
		rw, ok := c.(rwCaller)
		if !ok {
			return nil, errNoPrimitive
		}
		return rw.rlock(ctx, name)
	}},
	{"semaphore", func(ctx context.Context, c caller, name string) (func(context.Context) error, error) {
		s, ok := c.(semCaller)
		if !ok {
			return nil, errNoPrimitive
		}
		return s.acquire(ctx, name, 8, 1)
	}},
	{"lockall3", func(ctx context.Context, c caller, name string) (func(context.Context) error, error) {
		m, ok := c.(multiCaller)
		if !ok {
			return nil, errNoPrimitive
		}
		return m.lockAll(ctx, []string{name + "/a", name + "/b", name + "/c"})
	}},
}

var errNoPrimitive = fmt.Errorf("the system's callers lack this primitive")

// runPrimitives runs S1 and S2 with each primitive the system's callers
// have.
func runPrimitives(cfg config, sysName string, sys system, run int, rep *report) {
	if !cfg.scenarios["P"] {
		return
	}
	cs, err := callers(sys, 1)
	if err != nil {
		rep.fail(sysName, "P", run, err)
		return
	}
	c := cs[0]
	closeCallers(cs)
	_, rw := c.(rwCaller)
	_, sem := c.(semCaller)
	_, multi := c.(multiCaller)
	if !rw || !sem || !multi {
		return
	}
	for _, p := range primitives {
		s1, s2 := "S1 "+p.name, "S2 "+p.name
		rep.fail(sysName, s1, run, runS1With(cfg, sysName, s1, sys, run, rep, p.lock))
		rep.fail(sysName, s2, run, runS2With(cfg, sysName, s2, sys, run, rep, p.lock))
	}
}

// printPrimitives prints, for each lockraft system that ran them, each
// primitive's S1 and S2 figures over the same system's Lock figures.
func (r *report) printPrimitives(w io.Writer, mean func(system, scen, metric string) (float64, bool)) {
	var systems []string
	for _, x := range r.rows {
		if isLockraft(x.System) && strings.HasPrefix(x.Scenario, "S1 ") && !slices.Contains(systems, x.System) {
			systems = append(systems, x.System)
		}
	}
	if len(systems) == 0 {
		return
	}
	fmt.Fprintln(w, "\nprimitives against Lock on the same system (÷ Lock's S1/S2; p50 and p99 lower is better, pairs/s higher; the aim is within 1.3×):")
	fmt.Fprintln(w, "| system | primitive | S1 p50 | S1 p99 | S2 pairs/s | S2 p50 |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|")
	for _, sys := range systems {
		for _, p := range primitives {
			line := fmt.Sprintf("| %s | %s |", sys, p.name)
			for _, m := range []struct{ base, metric string }{
				{"S1", "pair_p50_ms"}, {"S1", "pair_p99_ms"}, {"S2", "pairs_per_s"}, {"S2", "pair_p50_ms"},
			} {
				lock, ok1 := mean(sys, m.base, m.metric)
				prim, ok2 := mean(sys, m.base+" "+p.name, m.metric)
				if !ok1 || !ok2 || lock == 0 {
					line += " – |"
					continue
				}
				line += fmt.Sprintf(" %.2f× |", prim/lock)
			}
			fmt.Fprintln(w, line)
		}
	}
}
