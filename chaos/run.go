package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/lockraft/lockraft/internal/knobs"
	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/internal/simnet"
	"github.com/lockraft/lockraft/node"
)

// RunConfig is one bounded, seeded run.
type RunConfig struct {
	// LeaderClock lets clock faults hit the leader (see Schedule.followerOr).
	LeaderClock bool
	Seed        uint64
	Duration    time.Duration
	Faults      []string // kinds; empty: no faults
	Size        int      // default 3
	BaseDir     string   // default a temp dir, removed afterwards
	Workload    WorkloadOptions
	Logf        func(string, ...any)
	Logger      *slog.Logger // node logs (default discarded)
	// Trace, if set, takes the nodes' elections apart for the leader-churn
	// measurement (FailoverSummary.Elections); the logs go on to Logger.
	Trace *ElectionTrace
	// CheckTimeout bounds porcupine (default 60 s).
	CheckTimeout time.Duration
	// SkipDurability skips the full-cluster crash and replay at the end.
	SkipDurability bool
	// Store, if set, is used instead of a correct one (planted bugs).
	Store *FencedStore
	// Tune, if set, adjusts every node's Config; Plant plants bugs in every
	// node's knobs.
	Tune  func(*node.Config)
	Plant func(*knobs.Node)
	// ExtraProbeSlack widens the L3 bound the leader-churn probes are judged
	// by (never the S5 side: a grant before the holder's deadline is always
	// a violation). For go test, where every package runs under the race
	// detector beside the others on two cores; the soak keeps the tight
	// bound.
	ExtraProbeSlack time.Duration
	// Sim runs the cluster on the in-memory network: call Run inside
	// RunSim (sim.go) for a deterministic, seed-replayable run.
	Sim bool
	// SimTrace, if set, is told every event of the simulation's network.
	SimTrace func(simnet.Event)
	// checkLater: RunSim runs porcupine itself, after the bubble (inside it
	// the check's time bound would be fake time, which a busy check never
	// lets advance).
	checkLater bool
	// HistoryFile, if set, receives the run's history (gob, SavedHistory)
	// before the end checks, to study the checker offline.
	HistoryFile string
}

// Report is what a run found.
type Report struct {
	Seed           uint64
	Faults         string
	Ops            int // completed client operations
	Determinate    int // ok or locked
	Grants         int
	Entries        int // distinct log indices applied
	Linearizable   porcupine.CheckResult
	Writes, Stale  int64
	Accepted, Live int64
	LongestGap     time.Duration
	// Failover: what the leader kills cost (leader-churn only).
	Failover   *FailoverSummary
	Injected   map[string]int
	OpsByPrim  map[string]int // completed client operations per primitive
	Observed   int            // election changes observers saw
	Violations []string       // must be empty
	// Trace is the simulation's network trace hash (0 over gRPC): the same
	// seed gives the same one.
	Trace uint64

	checkLater func()   // RunSim: the linearizability check, to run outside the bubble
	Notes      []string // informational
}

// S5Exempt: faults under which the holder cannot learn first by design: a
// monotonic clock that jumps or runs beyond DriftRatio (clock-jump,
// clock-rate: on a leader it expires sessions early), and a paused or
// SIGSTOPped process notices nothing while stopped. Live overlaps under
// these are notes; fencing must still hold. Wall-clock steps on any node
// and rates within DriftRatio are not exempt: S5 rests only on monotonic
// rates within DriftRatio of each other.
func S5Exempt(kinds []string) bool {
	for _, k := range kinds {
		if k == FaultPause || k == ProcStop || k == FaultClockJump || k == FaultClockRate {
			return true
		}
	}
	return false
}

// runSize is the number of nodes of a run given size (0: the default): 3,
// or 5 under leader churn, so that a majority is up with a crashed holder
// and a hit leader.
func runSize(size int, leaderChurn bool) int {
	switch {
	case size != 0:
		return size
	case leaderChurn:
		return 5
	}
	return 3
}

// tempBase sets an empty *dir to a new temporary directory whose name
// starts with prefix; remove removes that directory (and nothing when *dir
// was set).
func tempBase(dir *string, prefix string) (remove func(), err error) {
	if *dir != "" {
		return func() {}, nil
	}
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	*dir = d
	return func() { os.RemoveAll(d) }, nil
}

// Run starts a cluster, runs the workload under the schedule, then checks.
func Run(ctx context.Context, rc RunConfig) (*Report, error) {
	leaderChurn := slices.Contains(rc.Faults, FaultLeaderChurn)
	restartedWaiter := slices.Contains(rc.Faults, FaultRestartedWaiter)
	rc.Size = runSize(rc.Size, leaderChurn)
	if rc.Logf == nil {
		rc.Logf = func(string, ...any) {}
	}
	if rc.Workload.ClientsPerNode == 0 {
		rc.Workload = DefaultWorkload()
	}
	if rc.CheckTimeout == 0 {
		rc.CheckTimeout = 60 * time.Second
	}
	remove, err := tempBase(&rc.BaseDir, "chaos-")
	if err != nil {
		return nil, err
	}
	defer remove()
	if leaderChurn && (len(rc.Faults) != 1 || rc.Size < 3) {
		return nil, fmt.Errorf("fault %q runs on its own (it schedules its own kills), on 3 nodes or more", FaultLeaderChurn)
	}
	if restartedWaiter && len(rc.Faults) != 1 {
		return nil, fmt.Errorf("fault %q runs on its own (it schedules its own kills)", FaultRestartedWaiter)
	}
	for _, f := range []string{FaultChurn, FaultChurnLight} {
		if slices.Contains(rc.Faults, f) {
			if len(rc.Faults) != 1 {
				return nil, fmt.Errorf("fault %q runs on its own (gossip-mode fleet)", f)
			}
			return runChurn(ctx, rc, f == FaultChurnLight)
		}
	}
	rc.Logf("seed %d faults %v duration %v", rc.Seed, rc.Faults, rc.Duration)
	if rc.Trace != nil {
		if rc.Logger != nil {
			rc.Trace.next = rc.Logger.Handler()
		}
		rc.Logger = slog.New(rc.Trace)
	}
	rng := rand.New(rand.NewPCG(rc.Seed, 0xc4a05))
	c, err := NewCluster(Options{Size: rc.Size, BaseDir: rc.BaseDir, Seed: rc.Seed, Sim: rc.Sim, SimTrace: rc.SimTrace, Logger: rc.Logger, Tune: rc.Tune, Plant: rc.Plant}, rc.Logf)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	_, err = c.WaitLeader(wctx)
	wcancel()
	if err != nil {
		return nil, err
	}
	if rc.Sim {
		rc.Workload.Jitter = true
	}
	w := NewWorkload(c, rc.Seed, rc.Workload)
	if rc.Store != nil {
		w.Store = rc.Store
	}
	runCtx, cancel := context.WithTimeout(ctx, rc.Duration)
	defer cancel()
	sched := &Schedule{C: c, Kinds: rc.Faults, RNG: rng, Logf: rc.Logf, LeaderClock: rc.LeaderClock, Applied: map[string]int{}}
	done := make(chan struct{})
	var probes []*probeResult
	var churner *leaderChurner
	var waiters []*waiterProbe
	go func() {
		defer close(done)
		switch {
		case leaderChurn:
			probes, churner = runLeaderChurn(runCtx, c, rng, rc.Logf, sched.Applied)
		case restartedWaiter:
			waiters = runRestartedWaiter(runCtx, c, rng, rc.Logf, sched.Applied)
		case len(rc.Faults) > 0:
			sched.Run(runCtx)
		}
	}()
	w.Run(runCtx)
	<-done
	end := w.H.Now()

	rep := &Report{Seed: rc.Seed, Faults: strings.Join(rc.Faults, ","), Injected: sched.Applied}
	viol := func(f string, a ...any) { rep.Violations = append(rep.Violations, fmt.Sprintf(f, a...)) }

	// Settle: end every fault, restart crashed nodes (their restart closes
	// the sessions of the crashed incarnation), wait for a leader.
	if churner != nil {
		churner.ranAgain(0, time.Now())
	}
	if err := c.HealAll(); err != nil {
		return nil, err
	}
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if _, err := c.WaitLeader(sctx); err != nil {
		viol("no leader after healing: %v", err)
	}
	nodeSetProbe(c).checkSettled(sctx, "", viol)
	var failover *FailoverSummary
	var deadHolds []deadHold
	if churner != nil {
		// Before the durability check's full restart, which ends every
		// session: every dead hold has been released by now (no leftovers).
		failover, deadHolds = summarizeFailover(rc.Size, c.SessionTTL(), c.ElectionTimeout(), churner.gapsCopy(),
			churner.deathsCopy(), c.Applied.lifeCopy())
		if rc.Trace != nil {
			failover.Elections = rc.Trace.breakdown(churner.gapsCopy(), c.ElectionTimeout())
		}
	}

	// Durability: crash every node at once, wipe one node's lock table so its
	// restart replays the whole raft log, restart all and compare.
	if !rc.SkipDurability {
		replay := c.IDs()[rng.IntN(rc.Size)]
		c.Stop()
		if err := c.WipeLockTable(replay); err != nil {
			viol("wipe n%d: %v", replay, err)
		}
		c.Applied.Watch(replay, c.Incarnation(replay)+1)
		for _, id := range c.IDs() {
			if err := c.Restart(id); err != nil {
				return nil, err
			}
		}
		dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
		if _, err := c.WaitLeader(dctx); err != nil {
			viol("no leader after full restart: %v", err)
		}
		nodeSetProbe(c).checkSettled(dctx, "after full restart", viol)
		dcancel()
		lost := 0
		for _, op := range w.H.Ops() {
			if op.Kind != OpUnlock && op.Outcome == OK && !c.Applied.WatchedSaw(op.Token) {
				if lost++; lost <= 5 {
					viol("S3: acknowledged grant %s/%s token %d not replayed by n%d from its log", op.Name, op.Owner, op.Token, replay)
				}
			}
		}
		if lost > 5 {
			viol("S3: %d acknowledged grants not replayed in all", lost)
		}
	}

	ops := w.H.Ops()
	finishReport(rep, ops, end, w.H, c.Applied, w.Store, rc, viol)
	if leaderChurn {
		var cfg node.Config
		FastConfig(&cfg)
		if rc.Tune != nil {
			rc.Tune(&cfg)
		}
		// Slack: round trips and fsyncs (5 ticks), and the silence threshold
		// (2 keepalive intervals) for the corner where the leader that saw
		// the holder's last keepalive is lost before its mark commits and a
		// voter of the next leader's majority restarted meanwhile
		// (node/internal/lease).
		slack := 5*cfg.TickInterval + 2*cfg.KeepaliveInterval + rc.ExtraProbeSlack
		if !churner.restartAfter {
			probeVerdicts(probes, cfg.SessionTTL, slack, viol, func(s string) { rep.Notes = append(rep.Notes, s) })
		}
		failoverVerdicts(failover, deadHolds, churner.gapsCopy(), slack, viol)
		rep.Failover = failover
		rep.Notes = append(rep.Notes, failover.String())
	}
	waiterVerdicts(waiters, c.SessionTTL(), c.KeepaliveInterval(), 4*c.ElectionTimeout()+rc.ExtraProbeSlack, viol,
		func(s string) { rep.Notes = append(rep.Notes, s) })
	checkObservations(rep, w, c.Applied, viol)
	if nw := c.Net(); nw != nil {
		c.Stop()
		rep.Trace = nw.TraceHash()
	}
	return rep, nil
}

// checkObservations checks what the election observers saw against the
// applied log.
func checkObservations(rep *Report, w *Workload, applied *AppliedLog, viol func(string, ...any)) {
	obs := w.observations()
	lagged := 0
	for _, o := range obs {
		rep.Observed += len(o.Changes)
		if o.End == lockerr.ErrObserveLagged.Error() {
			lagged++
		}
	}
	if lagged > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("Observe: %d of %d observations ended with ErrObserveLagged (told, then observed again)",
			lagged, len(obs)))
	}
	for i, s := range CheckObservations(obs, applied) {
		if i < 5 {
			viol("Observe: %s", s)
		}
	}
}
