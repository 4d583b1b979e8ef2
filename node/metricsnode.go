package node

import (
	"context"
	"os"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/node/internal/inspect"
	"github.com/lockraft/lockraft/transport"
)

// Metrics, node side. Two kinds:
//
//   - Counters and gauges are read at scrape time (MetricsSnapshot, one loop
//     turn): the node keeps plain loop-owned counters (loopCounters) that
//     cost an increment on rare events (leader change, snapshot, expiry,
//     push), whether or not anyone scrapes, and the lock table is counted by
//     a pass over it at scrape time (lockfsm.Stats).
//   - Latencies are observed on the hot paths through MetricsHooks, only
//     when Config.Metrics is set: every use is one nil check when it is not,
//     and the hooks themselves must not allocate.

// MetricsHooks receive latencies from the node's hot paths. A nil field is
// skipped. Each is called from the node's goroutines (the loop, the
// appender, a forwarding goroutine) and must be fast, non-blocking, safe for
// concurrent use and allocation-free (a prometheus Histogram's Observe is).
type MetricsHooks struct {
	// Commit: one of this node's commands (Acquire, Release, Cancel), from
	// its first proposal to its result applied here (on a light member:
	// pushed back by the leader).
	Commit func(time.Duration)
	// Fsync: one raft log save (write and fdatasync) by the appender.
	Fsync func(time.Duration)
	// Forward: one call carrying a light member's queued commands to the
	// leader, until the leader's reply.
	Forward func(time.Duration)
	// QueueHead ("grant after head of queue"): for an Acquire of this node
	// that queued, from the apply of the entry that made it the head of its
	// name's queue to the apply of the entry that granted it, on this node's
	// clock: how long it waited for the holder alone, not behind other
	// waiters. Raft members only (a light member does not apply the log).
	QueueHead func(time.Duration)
}

// loopCounters are cumulative counts kept by the loop for Status and
// metrics. Plain integers: only the loop touches them.
type loopCounters struct {
	leaderChanges   uint64 // times this node saw a new leader (not counting "none")
	sessionsExpired uint64 // sessions the cluster expired (applied here)
	leasesExpired   uint64 // per-lock leases that ran out (applied here)
	pushesReceived  uint64 // results and events pushed to this light member
	tickWakes       uint64 // loop wake-ups by the raft ticker or a quiet follower's timer (node/internal/tick)
}

// noteExpiry counts an applied expiry (loop).
func (c *loopCounters) noteExpiry(cmd *lockfsm.Command, res lockfsm.Result) {
	switch {
	case cmd.Kind == lockfsm.KindExpireSession && res.Status == lockfsm.SessionClosed:
		c.sessionsExpired++
	case cmd.Kind == lockfsm.KindExpireLease && res.Status == lockfsm.LeaseExpired:
		c.leasesExpired++
	}
}

// peerWatch is the leader's memory of when each voter or learner last
// showed raft's RecentActive (noted every tick). raft resets RecentActive
// every election timeout, so on its own it reads "inactive" for a moment
// after each reset; health is "seen within an election timeout". Loop.
type peerWatch struct {
	seen   map[uint64]time.Time
	self   uint64
	within time.Duration // an election timeout and a tick
}

// note records which peers raft saw recently (each tick; forgotten when
// this node does not lead).
func (w *peerWatch) note(rn *raft.RawNode, leading bool, now time.Time) {
	if !leading {
		w.seen = nil
		return
	}
	if w.seen == nil {
		w.seen = map[uint64]time.Time{}
	}
	rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if pr.RecentActive {
			w.seen[id] = now
		}
	})
}

// active reports whether the leader heard from peer id within the last
// election timeout (and a tick).
func (w *peerWatch) active(id uint64, now time.Time) bool {
	if id == w.self {
		return true
	}
	at, ok := w.seen[id]
	return ok && now.Sub(at) <= w.within
}

// queueHeads times this node's queued Acquires from reaching the head of
// their queue to their grant, for MetricsHooks.QueueHead. Loop; only with
// that hook, on a raft member.
type queueHeads struct {
	// since: this node's queued Acquires at the head of their queue, by
	// seq, since when.
	since map[uint64]time.Time
	// watch: names where this node has queued Acquires not yet at the head,
	// with their seqs.
	watch map[string][]uint64
}

// onApply follows one applied command of session own (0: none) and its
// events, reading the lock table where a queue's head moved and the clock
// at most once.
func (q *queueHeads) onApply(cmd *lockfsm.Command, res lockfsm.Result, events []lockfsm.Event, own uint64,
	fsm *lockfsm.FSM, clk Clock, hook func(time.Duration)) {
	if q.since == nil {
		q.since, q.watch = map[uint64]time.Time{}, map[string][]uint64{}
	}
	var now time.Time
	clock := func() time.Time {
		if now.IsZero() {
			now = clk.Now()
		}
		return now
	}
	if own != 0 && cmd.Kind == lockfsm.KindAcquire && cmd.Session == own && res.Status == lockfsm.Queued && !res.Duplicate {
		if res.Position == 1 {
			q.since[cmd.Seq] = clock()
		} else {
			q.watch[cmd.Name] = append(q.watch[cmd.Name], cmd.Seq)
		}
	}
	for i := range events {
		ev := &events[i]
		if ev.Session == own && own != 0 {
			switch ev.Kind {
			case lockfsm.EventGranted:
				if ev.FromQueue {
					since, ok := q.since[ev.Seq]
					if !ok {
						since = clock() // became the head in this very entry
					}
					hook(clock().Sub(since))
					delete(q.since, ev.Seq)
					q.unwatch(ev.Name, ev.Seq)
				}
			case lockfsm.EventWaitEnded:
				delete(q.since, ev.Seq)
				q.unwatch(ev.Name, ev.Seq)
			}
		}
		if (ev.Kind == lockfsm.EventGranted && ev.FromQueue) || ev.Kind == lockfsm.EventWaitEnded {
			if seqs := q.watch[ev.Name]; len(seqs) > 0 {
				if li, ok := fsm.Lock(ev.Name); ok && len(li.Waiters) > 0 && li.Waiters[0].Session == own {
					if head := li.Waiters[0].Seq; q.unwatch(ev.Name, head) {
						q.since[head] = clock()
					}
				}
			}
		}
	}
}

// unwatch removes seq from name's watch list; true if it was there.
func (q *queueHeads) unwatch(name string, seq uint64) bool {
	seqs := q.watch[name]
	for i, s := range seqs {
		if s == seq {
			seqs = append(seqs[:i], seqs[i+1:]...)
			if len(seqs) == 0 {
				delete(q.watch, name)
			} else {
				q.watch[name] = seqs
			}
			return true
		}
	}
	return false
}

// PeerProgress is the leader's view of one voter or learner.
type PeerProgress struct {
	ID      uint64
	Learner bool
	Match   uint64
	Lag     uint64 // leader's last index − Match
	Active  bool   // heard from within the last election timeout
}

// MetricsSnapshot is what a metrics scrape reads from the node, in one loop
// turn.
type MetricsSnapshot struct {
	ID       uint64
	Role     string // RoleVoter, RoleLearner or RoleLight ("" when removed)
	Leader   uint64
	IsLeader bool
	Session  uint64
	Term     uint64
	Commit   uint64
	Applied  uint64

	Table lockfsm.TableStats // this replica's table (empty on a light member)

	LeaderChanges     uint64
	SnapshotsTaken    uint64
	SnapshotsRestored uint64
	SnapshotBytes     int64 // size of the newest snapshot file (0: none)
	SessionsExpired   uint64
	LeasesExpired     uint64
	PushesSent        uint64
	PushesReceived    uint64
	Relearned         uint64 // grants a light member learned by asking, a push having been lost

	Peers  []PeerProgress    // leader only: every other voter and learner
	Gossip map[string]int    // members by gossip state (nil without gossip)
	Roles  map[string]int    // members by role, as this node's configuration and gossip say
	Extra  map[string]uint64 // batching and forwarding counters: appends_sent, entries_sent, commit_hints_sent, commit_hints_used, status_served, observe_gaps, observe_lags
}

// MetricsSnapshot reads the node's counters and gauges. Cost: one loop turn
// and a pass over the lock table (lockfsm.Stats: O(names), no allocation,
// about 60 ns of CPU a name by lockfsm's BenchmarkScan, so 6 ms at 100,000
// names, during which the loop waits); call it at scrape time, not per
// operation.
func (n *Node) MetricsSnapshot(ctx context.Context) (MetricsSnapshot, error) {
	reply := make(chan MetricsSnapshot, 1)
	if err := n.do(ctx, func() { reply <- n.metricsSnapshot() }); err != nil {
		return MetricsSnapshot{}, err
	}
	var s MetricsSnapshot
	select {
	case s = <-reply:
	case <-ctx.Done():
		return MetricsSnapshot{}, context.Cause(ctx)
	case <-n.donec:
		return MetricsSnapshot{}, n.stoppedErr()
	}
	// Outside the loop: a stat of the snapshot file and the gossip list.
	if s.Applied > 0 && !n.light() {
		if snap, err := n.storage.Snapshot(); err == nil {
			if idx := snap.GetMetadata().GetIndex(); idx > 0 {
				if fi, err := os.Stat(transport.SnapshotPath(n.snapDir, idx)); err == nil {
					s.SnapshotBytes = fi.Size()
				}
			}
		}
	}
	if n.ml != nil {
		s.Gossip = map[string]int{}
		for _, st := range []membership.State{membership.StateAlive, membership.StateFailed, membership.StateLeft} {
			s.Gossip[st.String()] = 0
		}
		for _, m := range n.ml.Members() {
			s.Gossip[m.State.String()]++
		}
	}
	return s, nil
}

func (n *Node) metricsSnapshot() MetricsSnapshot {
	c := &n.loop.stats
	s := MetricsSnapshot{
		ID: n.id, Leader: n.loop.leader, IsLeader: n.loop.isLeader, Session: n.loop.own.id,
		Applied: n.loop.lastApplied, Table: n.fsm.Stats(),
		LeaderChanges: c.leaderChanges, SnapshotsTaken: n.loop.jobs.snapshots, SnapshotsRestored: n.snapshotsRestored.Load(),
		SessionsExpired: c.sessionsExpired, LeasesExpired: c.leasesExpired,
		PushesSent: n.fwd.PushesSent(), PushesReceived: c.pushesReceived, Relearned: n.relearned.Load(),
		Extra: map[string]uint64{"appends_sent": n.loop.appendsSent, "entries_sent": n.loop.entriesSent,
			"commit_hints_sent": n.loop.hints.sent, "commit_hints_used": n.loop.hints.used,
			"status_served": n.statusServed.Load(), "observe_gaps": n.observeGaps.Load(),
			"observe_lags": n.loop.observe.lags},
	}
	bs := n.rn.BasicStatus()
	s.Term, s.Commit = bs.GetTerm(), bs.GetCommit()
	s.Role, s.Roles = inspect.Roles(n.loop.confState, n.Members(), n.id, n.light())
	if n.loop.isLeader {
		st := n.rn.Status()
		last := st.Progress[n.id].Match
		for id, pr := range st.Progress {
			if id == n.id {
				continue
			}
			s.Peers = append(s.Peers, PeerProgress{ID: id, Learner: pr.IsLearner, Match: pr.Match,
				Lag: last - min(last, pr.Match), Active: pr.RecentActive || n.loop.peers.active(id, n.clock.Now())})
		}
	}
	return s
}
