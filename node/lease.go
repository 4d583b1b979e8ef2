package node

import (
	"log/slog"
	"time"

	"github.com/lockraft/lockraft/internal/knobs"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node/internal/lease"
)

// The lease engine (node/internal/lease) keeps the leader's session and
// lease deadlines, rule (R) and the node memory that carries a session's
// silence across leader changes; its package doc gives the safety argument.
// It is a pure core owned by the loop: the loop feeds it time, applied
// events and raft's heartbeats, proposes the commands it returns, and
// confirms keepalives with a quorum (confirm.go) before the engine answers
// them. This file is the glue.

// leaseConfig is the engine's view of the node's configuration and knobs.
func (c Config) leaseConfig(k *knobs.Node, log *slog.Logger) lease.Config {
	return lease.Config{
		Self:              c.ID,
		KeepaliveInterval: c.KeepaliveInterval,
		RetryInterval:     c.RetryInterval,
		ElectionTimeout:   c.electionTimeout(),
		TickInterval:      c.TickInterval,
		LockDelay:         c.LockDelay,
		DriftRatio:        c.DriftRatio,
		Logger:            log,
		Knobs: lease.Knobs{
			FollowerExpiry:             k.FollowerExpiry,
			RestartDeadlinesOnFailover: k.RestartDeadlinesOnFailover,
			ReviveAsSilenceZero:        k.ReviveAsSilenceZero,
			AckWhileMarked:             k.AckWhileMarked,
		},
	}
}

// silenceThreshold: a session not heard from for this long is checkpointed.
func (c Config) silenceThreshold() time.Duration {
	return lease.Config{KeepaliveInterval: c.KeepaliveInterval}.SilenceThreshold()
}

// leaseHost is the node as the lease engine's Host: its lock table and its
// version gate.
type leaseHost Node

func (h *leaseHost) Sessions() []lockfsm.SessionInfo { return h.fsm.Sessions() }
func (h *leaseHost) Locks() []lockfsm.LockInfo       { return h.fsm.Locks() }
func (h *leaseHost) HasSession(id uint64) bool       { return h.fsm.HasSession(id) }
func (h *leaseHost) OlderMemberKnown() bool          { return h.fleet.OlderMemberKnown() }

// proposeAll proposes the engine's commands, in its order.
func (n *Node) proposeAll(cmds []lockfsm.Command) {
	for _, c := range cmds {
		n.proposeSessionless(c)
	}
}

// leaseReady arms the engine when the empty entry of this leader's term is
// applied; a new leader's first confirmation round asks for contact
// reports.
func (n *Node) leaseReady() {
	cmds, reportRound := n.loop.lease.Ready(n.clock.Now())
	if reportRound {
		n.loop.confirm.issue(n.loop.term, n.clock.Now(), true)
	}
	n.proposeAll(cmds)
}

// leaseKeepalive is w, a confirmed session keepalive, for the engine: its
// answer goes to w's caller.
func (w keepaliveWaiter) leaseKeepalive() lease.Keepalive {
	return lease.Keepalive{Session: w.session, Recv: w.recv, Reply: func(st lease.Status) { w.reply <- statusOf(st) }}
}

// statusOf is the engine's answer as a keepalive status.
func statusOf(st lease.Status) keepaliveStatus {
	switch st {
	case lease.OK:
		return keepaliveOK
	case lease.NotLeader:
		return keepaliveNotLeader
	case lease.NoSession:
		return keepaliveNoSession
	}
	return keepaliveFailed
}
