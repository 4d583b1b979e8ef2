package lockraft

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockraft/lockraft/node"
)

// nodeCollector reads the node's counters and gauges at scrape time
// (node.MetricsSnapshot: one loop turn and one pass over the lock table), so
// they cost nothing between scrapes.
type nodeCollector struct{ n *node.Node }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	dUp            = desc("lockraft_node_up", "1 if the node answered this scrape, 0 if it is closed or stopped serving.")
	dInfo          = desc("lockraft_build_info", "Always 1; the version label is lockraft.Version.", "version")
	dRole          = desc("lockraft_node_role", "1 for this node's role (voter, learner, light; none once removed).", "role")
	dHasSession    = desc("lockraft_session_open", "1 if this node's session is open (it can take locks).")
	dNames         = desc("lockraft_lock_names", "Names in this replica's lock table (held, waited for or delayed).")
	dHeld          = desc("lockraft_locks_held", "Names with a holder, in this replica's lock table (every raft member reports the same table; take max).")
	dWaiters       = desc("lockraft_lock_waiters", "Queued acquires over all names, in this replica's lock table.")
	dLongest       = desc("lockraft_lock_longest_queue", "The most waiters any one name has, in this replica's lock table.")
	dDelayed       = desc("lockraft_locks_delayed", "Names in their lock-delay after an expiry.")
	dSessions      = desc("lockraft_sessions", "Open sessions in this replica's table (one per serving member).")
	dSessExpired   = desc("lockraft_session_expiries_total", "Sessions the cluster expired (a member stopped keeping its session alive), applied here.")
	dLeaseExpired  = desc("lockraft_lease_expiries_total", "Per-lock leases (WithLease) that ran out, applied here.")
	dTerm          = desc("lockraft_raft_term", "Raft term this node is in.")
	dIsLeader      = desc("lockraft_raft_is_leader", "1 if this node is the raft leader.")
	dHasLeader     = desc("lockraft_raft_has_leader", "1 if this node knows a leader.")
	dLeaderChanges = desc("lockraft_raft_leader_changes_total", "Times this node saw a new leader.")
	dCommit        = desc("lockraft_raft_commit_index", "Raft commit index on this node.")
	dApplied       = desc("lockraft_raft_applied_index", "Last raft index applied on this node.")
	dPeerLag       = desc("lockraft_raft_peer_lag_entries", "Leader only: entries a voter or learner is behind the leader's log (last index − match).", "peer", "role")
	dPeerActive    = desc("lockraft_raft_peer_active", "Leader only: 1 if the leader heard from the peer within the last election timeout.", "peer", "role")
	dSnapTaken     = desc("lockraft_snapshots_taken_total", "Lock-table snapshots this node took (and compacted its log after).")
	dSnapRestored  = desc("lockraft_snapshots_restored_total", "Lock-table restores from a leader's snapshot.")
	dSnapBytes     = desc("lockraft_snapshot_size_bytes", "Size of this node's newest snapshot file.")
	dGossip        = desc("lockraft_gossip_members", "Members this node's gossip knows, by state.", "state")
	dMembers       = desc("lockraft_members", "Members by role as this node sees them (voters and learners from its raft configuration, light members from gossip).", "role")
	dPushesSent    = desc("lockraft_light_pushes_sent_total", "Leader: results and events pushed to light members.")
	dPushesRecv    = desc("lockraft_light_pushes_received_total", "Light member: results and events the leader pushed to it.")
	dRelearned     = desc("lockraft_light_relearns_total", "Light member: grants learned by asking the leader after a push was lost.")
	dAppends       = desc("lockraft_raft_appends_sent_total", "Leader: raft appends carrying entries sent to followers.")
	dEntries       = desc("lockraft_raft_entries_sent_total", "Leader: entries those appends carried (their ratio is the batching).")
	dHintsSent     = desc("lockraft_commit_hints_sent_total", "Leader: commit hints sent.")
	dHintsUsed     = desc("lockraft_commit_hints_used_total", "Follower: commit hints that advanced its commit index.")
)

var allDescs = []*prometheus.Desc{dUp, dInfo, dRole, dHasSession, dNames, dHeld, dWaiters, dLongest, dDelayed,
	dSessions, dSessExpired, dLeaseExpired, dTerm, dIsLeader, dHasLeader, dLeaderChanges, dCommit, dApplied,
	dPeerLag, dPeerActive, dSnapTaken, dSnapRestored, dSnapBytes, dGossip, dMembers, dPushesSent, dPushesRecv,
	dRelearned, dAppends, dEntries, dHintsSent, dHintsUsed}

// Describe implements prometheus.Collector.
func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A node that does not answer
// within two seconds (closed, stopped) reports lockraft_node_up 0 and
// nothing else, so the rest of the process's metrics still scrape.
func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge(dInfo, 1, Version)
	s, err := c.n.MetricsSnapshot(ctx)
	if err != nil {
		gauge(dUp, 0)
		return
	}
	gauge(dUp, 1)
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	for _, r := range []string{RoleVoter, RoleLearner, RoleLight} {
		gauge(dRole, b(s.Role == r), r)
	}
	gauge(dHasSession, b(s.Session != 0))
	gauge(dNames, float64(s.Table.Names))
	gauge(dHeld, float64(s.Table.Held))
	gauge(dWaiters, float64(s.Table.Waiters))
	gauge(dLongest, float64(s.Table.LongestQueue))
	gauge(dDelayed, float64(s.Table.Delayed))
	gauge(dSessions, float64(s.Table.Sessions))
	counter(dSessExpired, s.SessionsExpired)
	counter(dLeaseExpired, s.LeasesExpired)
	gauge(dTerm, float64(s.Term))
	gauge(dIsLeader, b(s.IsLeader))
	gauge(dHasLeader, b(s.Leader != 0))
	counter(dLeaderChanges, s.LeaderChanges)
	gauge(dCommit, float64(s.Commit))
	gauge(dApplied, float64(s.Applied))
	for _, p := range s.Peers {
		role, id := RoleVoter, fmt.Sprintf("%016x", p.ID)
		if p.Learner {
			role = RoleLearner
		}
		gauge(dPeerLag, float64(p.Lag), id, role)
		gauge(dPeerActive, b(p.Active), id, role)
	}
	counter(dSnapTaken, s.SnapshotsTaken)
	counter(dSnapRestored, s.SnapshotsRestored)
	gauge(dSnapBytes, float64(s.SnapshotBytes))
	for state, k := range s.Gossip {
		gauge(dGossip, float64(k), state)
	}
	for role, k := range s.Roles {
		gauge(dMembers, float64(k), role)
	}
	counter(dPushesSent, s.PushesSent)
	counter(dPushesRecv, s.PushesReceived)
	counter(dRelearned, s.Relearned)
	counter(dAppends, s.Extra["appends_sent"])
	counter(dEntries, s.Extra["entries_sent"])
	counter(dHintsSent, s.Extra["commit_hints_sent"])
	counter(dHintsUsed, s.Extra["commit_hints_used"])
}
