package node

import (
	"context"
	"os"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/node/internal/inspect"
	"github.com/lockraft/lockraft/transport"
)

// Metrics, node side. Two kinds:
//
//   - Counters and gauges are read at scrape time (MetricsSnapshot, one loop
//     turn): the node keeps plain loop-owned counters (counters.go) that
//     cost an increment on rare events (leader change, snapshot, expiry,
//     push), whether or not anyone scrapes, and the lock table is counted by
//     a pass over it at scrape time (lockfsm.Stats).
//   - Latencies are observed on the hot paths through MetricsHooks, only
//     when Config.Metrics is set: every use is one nil check when it is not,
//     and the hooks themselves must not allocate.

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

// MetricsSnapshot reads the node's counters and gauges. Cost: one loop turn;
// the table's counts are kept as it changes (lockfsm.Stats: O(names changed
// since the last commit), not a pass over the table), so a scrape of a table
// of a million names does not hold up the loop.
func (n *Node) MetricsSnapshot(ctx context.Context) (MetricsSnapshot, error) {
	s, err := readIn(ctx, n, ReadOptions{Stale: true}, n.metricsSnapshot)
	if err != nil {
		return MetricsSnapshot{}, err
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
	s.Role, s.Roles = inspect.Roles(n.loop.confState, n.Members(), n.id, n.light(), n.fleet.MemberSet().Removed)
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
