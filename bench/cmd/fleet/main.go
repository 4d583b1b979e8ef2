// Command fleet measures a whole lockraft fleet on one machine, one OS
// process per member (each a child of this command, as each member would
// be its own service process): by default 300 members formed by gossip —
// 5 voters (the founders m0..m4), 2 standbys (learners: VoterPolicy
// {MaxVoters: 5, MaxLearners: 2}) and the rest light members — with the
// production timings (LANGossipTiming, 100 ms ticks, 10 s session TTL,
// keepalives every 2.5 s). Each member serves its admin handler
// (/lockraft/), its own Prometheus registry (/metrics) and the control
// endpoints the phases drive (/stats, /load, /seq, /hold, /acquire) on a
// port of its own. A member takes about 25 MiB: 300 need about 7.5 GiB.
//
// On a machine of 2 cores, 300 processes are more than the scheduler can
// serve: each gets under 1 % of a core, and the leader's heartbeats no
// longer arrive within an election timeout. -per-process N then runs the
// light members N to a process (one Go runtime, its timers shared), while
// m0 … m<-own − 1> (the founders, the first standbys and their likely
// successors) keep a process each; a light member's CPU, RSS and wake-ups
// are its process's divided by N, and the crashed-holders phase kills
// whole processes. Even so the members' gossip while 300 form takes both
// cores; -light-nice 10 runs the light members' processes niced, so the
// voters (which in a fleet have machines of their own) are served first.
//
// The phases, each a row group of the table printed at the end:
//
//  1. Formation: starting every child (-batch at a time, each seeded with
//     m0's gossip address), then until every member can lock (readyz 200
//     everywhere) and the configuration holds 5 voters and the learners;
//     timed from the last child's READY and from the first start.
//  2. Idle (-idle after -settle): CPU % of a core and RSS of the leader and
//     of each role (median, max), the leader's wake-ups (voluntary context
//     switches) per second, the total RSS, and the light members' keepalive
//     round trips over the window (lockraft_keepalive_duration_seconds,
//     summed over the fleet): a leader slow to answer its members'
//     keepalives when they fall due together shows there.
//  3. Lock latency: -rounds rounds of -pairs sequential Lock+Unlock pairs
//     on a light member, a follower voter and the leader, alternately; the
//     light member's median over the voter's (target ≤ 1.5×).
//  4. Crashed holders: -kill of the light members each hold a lock, a
//     surviving light member waits on each (queued, as the leader's lock
//     view confirms), and all the holders are killed (SIGKILL) at once:
//     kill → grant at each waiter, against the session TTL plus slack.
//  5. Voter replacement under load: an S2 load (-callers on distinct
//     names, spread over the surviving members), a follower voter killed,
//     and the time until the leader's members view shows 5 voters again (a
//     standby promoted once the dead voter is removed, which the policy
//     allows after DeadVoterAfter, 5 minutes unless -dead-voter-after) and
//     its learners restored; the load's pairs/s before and during, errors.
//
// The machine's load average before and after is printed with the
// figures: CPU figures mean something only on a quiet machine.
//
//	go run ./cmd/fleet -size 300 -per-process 10 -light-nice 10 -dead-voter-after 30s   # from bench/
//	go run ./cmd/fleet -size 30 -idle 10s                                # a quick look
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lockraft/lockraft/bench/internal/childproc"
)

// founderCount is the voters the fleet forms with and keeps
// (VoterPolicy.MaxVoters).
const founderCount = 5

// Production timings the report compares with (lockraft's defaults).
const (
	sessionTTL        = 10 * time.Second
	keepaliveInterval = sessionTTL / 4
	tick              = 100 * time.Millisecond
)

var (
	flagSize      = flag.Int("size", 300, "members in the fleet (at least 5 voters + -learners + 2 light)")
	flagOwn       = flag.Int("own", 10, "members m0 … m<own-1> (the founders, the first standbys and their likely successors) run one per process")
	flagLightNice = flag.Int("light-nice", 0, "nice value of the processes after the first -own (light members): the voters then get the CPU first, as on machines of their own (0: not niced)")
	flagPerProc   = flag.Int("per-process", 1, "members per process after the first -own: several light members share one process (one Go runtime) where 300 processes would be more than the machine can schedule")
	flagLearners  = flag.Int("learners", 2, "standby learners (VoterPolicy.MaxLearners; 0: none)")
	flagIdle      = flag.Duration("idle", 60*time.Second, "idle measurement window")
	flagSettle    = flag.Duration("settle", 10*time.Second, "wait after the fleet is formed, before the idle window")
	flagKill      = flag.Float64("kill", 0.2, "fraction of the light members killed at once while holding locks")
	flagPairs     = flag.Int("pairs", 200, "sequential Lock+Unlock pairs per round of the latency phase")
	flagRounds    = flag.Int("rounds", 3, "rounds of the latency phase")
	flagCallers   = flag.Int("callers", 32, "concurrent callers of the S2 load while a voter is replaced")
	flagBatch     = flag.Int("batch", 20, "children started concurrently")
	flagDeadVoter = flag.Duration("dead-voter-after", 0, "VoterPolicy.DeadVoterAfter (0: the policy's default, 5 minutes): how long a voter must have failed before it is replaced")
	flagKeep      = flag.Bool("keep", false, "keep the children's data and logs (they are kept anyway when a phase fails)")

	// Child mode (set by the parent).
	flagChild = flag.Bool("child", false, "")
	flagDir   = flag.String("dir", "", "")
	flagNames = flag.String("names", "", "")
	flagSeed  = flag.String("seed", "", "")
)

func main() {
	flag.Parse()
	var err error
	if *flagChild {
		err = runChild()
	} else {
		err = runParent()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// began is when the command started: progress lines count from it.
var began = time.Now()

// progress writes a line on what the command is doing to stderr.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%7.1fs] %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
}

// runParent starts the fleet, runs the phases in order and prints the
// report, with whatever the phases measured before one failed.
func runParent() (err error) {
	light := *flagSize - founderCount - max(*flagLearners, 0)
	if light < 2 {
		return fmt.Errorf("-size %d leaves %d light members: at least 2 wanted (5 voters + %d learners + 2)", *flagSize, light, max(*flagLearners, 0))
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "fleet-")
	if err != nil {
		return err
	}
	f := &fleet{self: self, dir: dir}
	rep := &report{
		command:  "go run ./cmd/fleet " + strings.Join(os.Args[1:], " "),
		loadFrom: childproc.Loadavg(),
	}
	// The children run in process groups of their own, so an interrupt
	// reaches this command only: it kills them before it exits.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		fmt.Fprintln(os.Stderr, "fleet: interrupted: killing the children")
		f.killAll()
		os.RemoveAll(dir)
		os.Exit(130)
	}()
	defer func() {
		progress("closing the children")
		f.closeAll(20 * time.Second)
		rep.loadTo = childproc.Loadavg()
		rep.print(os.Stdout)
		if err != nil || *flagKeep {
			fmt.Printf("children's data and logs kept in %s\n", dir)
		} else {
			os.RemoveAll(dir)
		}
	}()
	learners := min(max(*flagLearners, 0), *flagSize-founderCount)
	rep.fleet = fmt.Sprintf("%d members (%d voters, %d learners, %d light), one process each", *flagSize, founderCount, learners, light)
	if *flagPerProc > 1 {
		rep.fleet = fmt.Sprintf("%d members (%d voters, %d learners, %d light): m0 … m%d one process each, the rest %d to a process",
			*flagSize, founderCount, learners, light, min(*flagOwn, *flagSize)-1, *flagPerProc)
	}
	if *flagLightNice > 0 {
		rep.fleet += fmt.Sprintf("; those after m%d at nice %d", min(*flagOwn, *flagSize)-1, *flagLightNice)
	}

	if err := formation(f, rep, learners); err != nil {
		return fmt.Errorf("formation: %w", err)
	}
	if err := idle(f, rep); err != nil {
		return fmt.Errorf("idle: %w", err)
	}
	if err := lockLatency(f, rep); err != nil {
		return fmt.Errorf("lock latency: %w", err)
	}
	if err := crashedHolders(f, rep); err != nil {
		return fmt.Errorf("crashed holders: %w", err)
	}
	if err := replaceVoter(f, rep, learners); err != nil {
		return fmt.Errorf("voter replacement: %w", err)
	}
	return nil
}
