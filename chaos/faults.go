package chaos

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/lockraft/lockraft/internal/faults"
)

// Fault kinds a schedule can inject.
const (
	FaultPartitionMajority = "partition-majority" // random majority/minority split
	FaultIsolateLeader     = "isolate-leader"
	FaultOneWay            = "oneway" // the leader's messages to one follower dropped
	FaultBridge            = "bridge"
	FaultCrash             = "crash" // kill -9 a node (the leader half the time), restart later
	FaultPause             = "pause" // freeze a node (the leader half the time)
	FaultClockJump         = "clock-jump"
	FaultClockRate         = "clock-rate"
	FaultNet               = "net"  // delay and connection resets into one node
	FaultMessages          = "msgs" // drop, duplicate, delay/reorder single raft messages and calls
	FaultDisk              = "disk" // a node's raft log writes or lock-table commits fail; repaired by a restart
)

// Clock faults within the clock assumption (monotonic rates within
// DriftRatio of each other; the wall clock may do anything): S5 is checked
// under them. FaultClockJump (a monotonic clock jumps forward) and
// FaultClockRate (one runs at 0.5–2×) are beyond it: S5Exempt.
const (
	FaultWallBack    = "wall-back"    // a node's wall clock steps back, 10 ms to 24 h; its monotonic clock does not move
	FaultWallForward = "wall-forward" // the same, forward
	FaultClockDrift  = "clock-drift"  // a node's monotonic (and wall) clock runs at 1±DriftRatio
)

// Groups: the coarse names the soak command accepts.
var Groups = map[string][]string{
	"partition": {FaultPartitionMajority, FaultIsolateLeader, FaultOneWay, FaultBridge},
	"clock":     {FaultWallBack, FaultWallForward, FaultClockDrift},
	"wall":      {FaultWallBack, FaultWallForward},
	"badclock":  {FaultClockJump, FaultClockRate},
	"net":       {FaultNet},
	"crash":     {FaultCrash},
	"pause":     {FaultPause},
	"msgs":      {FaultMessages},
	"disk":      {FaultDisk},
	"churn":     {FaultChurn},
	// churn-light: churn with light members (churn.go).
	"churn-light": {FaultChurnLight},
	// leader-churn: its own schedule (leaderchurn.go), on 5 nodes.
	"leader-churn": {FaultLeaderChurn},
	// restarted-waiter: its own schedule (restartedwaiter.go).
	"restarted-waiter": {FaultRestartedWaiter},
}

// ExpandFaults turns "partition,crash" (or "partition+crash") into fault
// kinds.
func ExpandFaults(s string) ([]string, error) {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '+' }) {
		f = strings.TrimSpace(f)
		if g, ok := Groups[f]; ok {
			out = append(out, g...)
			continue
		}
		switch f {
		case FaultPartitionMajority, FaultIsolateLeader, FaultOneWay, FaultBridge, FaultCrash, FaultPause, FaultClockJump, FaultClockRate, FaultNet, FaultMessages, FaultDisk, FaultChurn, FaultChurnLight,
			FaultWallBack, FaultWallForward, FaultClockDrift, FaultLeaderChurn, FaultRestartedWaiter:
			out = append(out, f)
		case "":
		default:
			return nil, fmt.Errorf("unknown fault %q", f)
		}
	}
	return out, nil
}

// Schedule injects faults of the given kinds, one at a time: fault for a
// random while, heal, quiet for a random while. Every random choice comes
// from the seeded RNG; choices that depend on who leads depend on timing.
type Schedule struct {
	C       *Cluster
	Kinds   []string
	RNG     *rand.Rand
	Logf    func(string, ...any)
	MaxHold time.Duration // longest fault (default 2.5 s)
	Applied map[string]int
	// LeaderClock lets clock faults hit the leader too (outside the
	// clock-rate assumption: see followerOr).
	LeaderClock bool
}

func (s *Schedule) pick(ids []uint64) uint64 { return ids[s.RNG.IntN(len(ids))] }

func (s *Schedule) leaderOr(ids []uint64) uint64 {
	if s.RNG.IntN(2) == 0 {
		if l := s.C.Leader(); l != 0 {
			return l
		}
	}
	return s.pick(ids)
}

// followerOr picks a node that does not lead now (any node if unknown).
// Clock faults use it unless LeaderClock is set: a leader whose monotonic
// clock jumps or runs at 0.5–2× is outside the clock-rate assumption S5
// rests on (it expires sessions early, so a holder can learn too late);
// mutual exclusion in the log and fencing still hold there, but the
// client-visible mutex history need not be linearizable.
func (s *Schedule) followerOr(ids []uint64) uint64 {
	if s.LeaderClock {
		return s.leaderOr(ids)
	}
	l := s.C.Leader()
	var others []uint64
	for _, id := range ids {
		if id != l {
			others = append(others, id)
		}
	}
	if len(others) == 0 {
		return s.pick(ids)
	}
	return s.pick(others)
}

func (s *Schedule) dur(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.RNG.Int64N(int64(hi-lo)+1))
}

// Run injects faults until ctx ends, then heals everything.
func (s *Schedule) Run(ctx context.Context) {
	if s.MaxHold == 0 {
		s.MaxHold = 2500 * time.Millisecond
	}
	if s.Applied == nil {
		s.Applied = map[string]int{}
	}
	ids := s.C.IDs()
	for ctx.Err() == nil {
		sleepCtx(ctx, s.dur(200*time.Millisecond, time.Second))
		if ctx.Err() != nil {
			break
		}
		kind := s.Kinds[s.RNG.IntN(len(s.Kinds))]
		hold := s.dur(300*time.Millisecond, s.MaxHold)
		s.Applied[kind]++
		var undo func()
		switch kind {
		case FaultPartitionMajority, FaultIsolateLeader, FaultOneWay, FaultBridge, FaultMessages, FaultNet:
			s.netFault(kind, ids)
			undo = s.C.Heal
		case FaultCrash:
			id := s.leaderOr(ids)
			s.C.Crash(id)
			undo = func() {
				if err := s.C.Restart(id); err != nil {
					s.Logf("restart n%d: %v", id, err)
				}
			}
		case FaultPause:
			id := s.leaderOr(ids)
			s.C.Pause(id)
			undo = func() { s.C.Resume(id); s.Logf("resume n%d", id) }
		case FaultClockJump:
			id := s.followerOr(ids)
			s.C.ClockJump(id, s.dur(100*time.Millisecond, 5*time.Second))
			undo = func() {}
		case FaultClockRate:
			id := s.followerOr(ids)
			r := 0.5 + 1.5*s.RNG.Float64()
			s.C.ClockRate(id, r)
			undo = func() { s.C.ClockRate(id, 1) }
		case FaultWallBack, FaultWallForward, FaultClockDrift:
			var d time.Duration
			if undo, d = s.clockFault(kind, ids); d > 0 {
				hold = d
			}
		case FaultDisk:
			id := s.leaderOr(ids)
			s.C.FailDisk(id, s.RNG.IntN(2) == 0)
			undo = func() {
				if err := s.C.RepairDisk(id); err != nil {
					s.Logf("repair n%d: %v", id, err)
				}
			}
		}
		sleepCtx(ctx, hold)
		undo()
		s.Logf("heal %s", kind)
	}
}

// netFault injects one of the network's faults, which healing the network
// (Cluster.Heal) undoes.
func (s *Schedule) netFault(kind string, ids []uint64) {
	switch kind {
	case FaultPartitionMajority:
		perm := s.RNG.Perm(len(ids))
		k := 1 + s.RNG.IntN((len(ids)-1)/2)
		var minority, majority []uint64
		for i, p := range perm {
			if i < k {
				minority = append(minority, ids[p])
			} else {
				majority = append(majority, ids[p])
			}
		}
		s.C.Partition(majority, minority)
	case FaultIsolateLeader:
		s.C.Isolate(s.leaderOr(ids))
	case FaultOneWay:
		from := s.leaderOr(ids)
		to := s.pick(ids)
		for to == from {
			to = s.pick(ids)
		}
		s.C.OneWay(from, to)
	case FaultBridge:
		s.C.Bridge(s.pick(ids))
	case FaultMessages:
		for _, id := range ids {
			p := faults.MessagePolicy{Seed: s.RNG.Uint64(), DropRate: 0.3 * s.RNG.Float64(),
				DupRate: 0.3 * s.RNG.Float64(), DelayRate: s.RNG.Float64(),
				DelayMax: s.dur(time.Millisecond, 60*time.Millisecond)}
			s.C.SetMessagePolicy(id, p)
		}
	case FaultNet:
		id := s.pick(ids)
		s.C.Degrade(id, s.dur(0, 20*time.Millisecond), uint32(s.RNG.IntN(20000)))
	}
}

// clockFault injects one of the clock faults within the clock assumption,
// on any node (the leader half the time), and returns its undo and, if not
// zero, how long the fault lasts.
func (s *Schedule) clockFault(kind string, ids []uint64) (undo func(), hold time.Duration) {
	id := s.leaderOr(ids)
	switch kind {
	case FaultWallBack, FaultWallForward:
		// Any size: log-uniform from 10 ms to 24 h. The step stays (as a
		// real one would until the next), so the offsets add up. Half the
		// time the node is then cut off for 1.5–2.5 session TTLs, so that a
		// session (and a lock) whose deadline rests on that clock expires
		// on the other side while the node holds: a holder whose deadline
		// follows the wall clock learns too late.
		d := time.Duration(float64(10*time.Millisecond) * math.Pow(8.64e6, s.RNG.Float64()))
		if kind == FaultWallBack {
			d = -d
		}
		s.C.WallStep(id, d)
		if s.RNG.IntN(2) == 0 {
			return func() {}, 0
		}
		s.C.Isolate(id)
		ttl := s.C.SessionTTL()
		return s.C.Heal, s.dur(3*ttl/2, 5*ttl/2)
	default: // FaultClockDrift
		dr := s.C.DriftRatio()
		s.C.ClockRate(id, 1+dr*(2*s.RNG.Float64()-1))
		return func() { s.C.ClockRate(id, 1) }, 0
	}
}
