// Command scalelocks measures what a large lock table costs the replicas that
// hold it: a million held locks by default, with queues of waiters on a tenth
// of the names.
//
// Setup. Three voters, each its own OS process (a child of this command) on
// its own data directory, form a static cluster through lockraft.Join with
// real gRPC on loopback and lockraft's default (production) timings. Each
// serves a small HTTP control endpoint: /stats (VmRSS split into anonymous
// and file-backed pages, Go heap from runtime/metrics, GC pauses, goroutines;
// ?gc=1 runs runtime.GC and debug.FreeOSMemory first), /serving (when its
// Join, Ready and first Lock+Unlock completed), /pairs (sequential
// Lock+Unlock inside the replica) and lockraft's admin handler under
// /lockraft/.
//
// The table is loaded by this command's own process, so that the callers'
// Lock handles and the waiters' blocked goroutines live there and a
// replica's RSS counts its table only. A light member (one that holds no
// copy of the log) would be the natural load process, but light members
// exist only in gossip fleets (a light member needs memberlist, and in a
// static cluster only the listed members open sessions), and a gossip fleet
// would not do either: its leader picks the longest-healthy non-member when
// it needs a learner, which would make the load process the member that
// receives the table in step 5. So the load process is a member of the
// static list: a voter that holds the table too, but is not measured. If it
// is elected, leadership is handed to r1 before measuring. Its one session
// holds every lock, so every member gets a per-session lock quota
// (WithQuotas) large enough for the table and its waiters (the default,
// 2^20, is below a million holds plus their waiters).
//
// lockraft cannot add a member to a static cluster, and a follower whose
// data directory is wiped cannot come back under its old id (the leader
// keeps sending from the index the member had acknowledged, and the wiped
// member refuses heartbeats whose commit lies beyond its empty log; it
// never catches up, and reopens sessions at the leader until its quota
// refuses them). So the static list has a fifth member, r5, that is not
// started until step 5: a new member from the leader's point of view, which
// must be sent the table. The list is therefore r1, r2, r3 (the measured
// replicas), the load process and r5: 5 voters, 4 up until step 5. The
// quorum (3) is what it would be with 4 voters, so commits wait for the
// same acknowledgements; the leader also retries its stream to the absent
// r5 (backing off to every 2 s), in both the empty and the full cluster.
//
// What it does and reports (a table per step, with the command line and the
// machine's load average; the sections carry these numbers and are printed
// in the order they run: 1 empty, 3, 1 full, 2, 6, 4, 5, 7, then a summary
// against the targets):
//
//  1. The empty cluster's RSS and Go heap per replica after a settle, read
//     as is and after a forced GC. Then -locks names "scale/<i>" are
//     acquired by -callers goroutines with -owners distinct owners
//     (WithOwner), and the handles kept; a tenth of the names (-waiters)
//     then get a queue of one or two blocked Lock calls from other owners.
//     After a settle, RSS and heap again: RSS per held lock per replica
//     beyond the empty cluster (target ≤ 200 B), with its anonymous and
//     file-backed parts, and the live heap per lock.
//  2. Lock+Unlock p50/p99 on other names (-pairs sequential pairs from the
//     load process, and the same inside a follower replica) on the empty
//     cluster and with the table full, and their ratio (target ≤ 1.2×).
//     The two measurements are minutes apart, and a shared machine's speed
//     moves by more than the target in that time, so a control cluster (the
//     same shape: c1..c3 and a second load member in this process; -control)
//     stays empty beside the measured one, and its pairs are measured
//     alternately with the measured cluster's, in runs of 50. Its own
//     full ÷ empty ratio is the machine's drift; the measured ratio divided
//     by it is the table's own cost. The control is stopped after this step.
//  3. While the table grows, a row every -sample locks: the acquisition
//     rate, the leader's Go heap, RSS and GC pauses (count, p50, max) in
//     that interval.
//  4. A follower killed with SIGKILL and started again on its data
//     directory: time from the new process's start until Join returns,
//     Ready returns and a Lock+Unlock through it succeeds (target ≤ 5 s).
//  5. The table sent to a new member: r5 starts on an empty data
//     directory. A marker lock is taken just before its start; caught up
//     means it holds the marker in its own table (applied index ≥ the
//     marker's grant index), read through a stale InspectLock. Time from
//     its process's start (target ≤ 5 s), the leader's latest snapshot
//     file, and whether r5 restored its table from a leader's snapshot
//     (lockraft_snapshots_restored_total: r5 alone runs with WithMetrics).
//  6. Paging over the whole table through the admin handler's /locks (what
//     `lockraftctl locks` does: pages of -page names, each after the last
//     one's Next), once through the leader and once through a follower,
//     while the load process runs sequential Lock+Unlock pairs: the paging
//     time, and the pairs' p99 and max during it (a member that stalls
//     shows as a long pair).
//  7. The load process closes its node: its session ends and releases the
//     whole table, while Lock+Unlock pairs run inside a follower (their
//     p99, max and failures), and how far that follower's applied index is
//     behind the leader's commit and how long it takes to answer a status
//     call, every 100 ms (-releasetrace: its runtime trace meanwhile). How
//     long until the leader's table is empty, the pairs inside the same
//     follower once more (empty, full, released: drift of the machine shows
//     as a difference between the first and the last), and each replica's
//     RSS after a forced GC.
//
// Run from bench/. Scaled from -locks 50000, a million held locks take
// about 0.6 GB of RSS and 0.5 GB of disk per replica, about 4 GB in the load
// process (its own copy of the table, the handles and the waiters'
// goroutines), and several minutes (paging alone passes over the whole
// table once per page, twice):
//
//	cd bench && go run ./cmd/scalelocks -locks 1000000
//	cd bench && go run ./cmd/scalelocks -locks 20000     # a smoke run, well under a minute
//
// Ctrl-C stops the children and removes the data directories (-keep keeps
// them).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

var (
	flagLocks   = flag.Int("locks", 1_000_000, "held locks in the table")
	flagOwners  = flag.Int("owners", 1000, "distinct owners (WithOwner) the held locks are spread over (at least 3)")
	flagCallers = flag.Int("callers", 256, "concurrent goroutines acquiring the table")
	flagWaiters = flag.Float64("waiters", 0.10, "fraction of the names that get a queue of one or two blocked Lock calls")
	flagPairs   = flag.Int("pairs", 300, "sequential Lock+Unlock pairs on other names, for latency")
	flagSample  = flag.Int("sample", 0, "a growth row every this many locks (0: a tenth of -locks)")
	flagSettle  = flag.Duration("settle", 5*time.Second, "wait before each memory reading")
	flagPage    = flag.Int("page", 1000, "names per inspection page (at most lockraft.MaxPageLimit)")
	flagPaging  = flag.Bool("paging", true, "run step 6 (paging over the whole table)")
	flagControl = flag.Bool("control", true, "run a second, empty cluster beside the measured one and measure its pairs alternately with step 2's, so that the machine's drift between the empty and the full measurement can be divided out")
	flagLease   = flag.Duration("lease", 0, "give every held lock a lease this long (WithLease; never renewed, so make it outlast the run); 0: none")
	flagRest    = flag.Duration("rest", 10*time.Second, "window over which the replicas' CPU at rest is measured, empty and with the table full")
	flagBase    = flag.String("dir", "", "where the data directories go (default: the system's temporary directory)")
	flagKeep    = flag.Bool("keep", false, "keep the data directories and logs (printed)")
	flagHeap    = flag.String("heapprofile", "", "write the leader's heap profile with the table full (after a forced GC) to this file (diagnosis: where the bytes go)")
	flagEndRun  = flag.Int("endrun", 0, "the names one entry of a session's end releases (Tuning.SessionEndRun); 0: lockraft's default")
	flagTrace   = flag.String("releasetrace", "", "write the measured follower's runtime execution trace over the first 25 s of step 7 to this file (diagnosis: what holds its loop while the table is released)")

	// Child mode (set by the parent).
	flagChild   = flag.Bool("child", false, "")
	flagDir     = flag.String("datadir", "", "")
	flagListen  = flag.String("listen", "", "")
	flagPeers   = flag.String("peers", "", "")
	flagQuota   = flag.Int("quota", 0, "")
	flagMetrics = flag.Bool("metrics", false, "")
)

func main() {
	start := time.Now()
	flag.Parse()
	var err error
	if *flagChild {
		err = replica(start)
	} else {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = parent(ctx)
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted (%v)", err)
		}
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scalelocks:", err)
		os.Exit(1)
	}
}
