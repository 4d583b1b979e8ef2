package lockraft

import (
	"time"

	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/node"
)

// Gossip configures gossip membership (WithGossip): the replicas find each
// other through Join's seeds, the named Founders form the cluster once they
// all see each other, and the leader adds, promotes and replaces voters by
// itself. Zero fields take the defaults documented on each. Encryption keys
// are set with WithGossipKeys.
type Gossip struct {
	// Name is this member's gossip name, unique in the fleet and stable
	// across restarts (on Kubernetes, the pod name of a StatefulSet).
	// Default "lockraft-" and the raft id in 16 hex digits. A founder must
	// set it.
	Name string

	// Founders are the gossip names of the members that form the cluster,
	// the same list on every member (members not in it only ever join). The
	// cluster is formed once, with all of them as its first voters, when all
	// see each other; a fleet configured with one list never forms two
	// clusters, whatever partitions or restarts happen during formation. On
	// Kubernetes: the first pods of the StatefulSet, e.g. orders-0, orders-1,
	// orders-2. Required, except in the single-node development mode
	// (BootstrapExpect 1 without Founders).
	Founders []string

	// BootstrapExpect is the number of founders (default len(Founders)); if
	// set it must equal len(Founders). 1 without Founders is the explicit
	// single-node development mode: this member founds a cluster of its own.
	BootstrapExpect int

	// BindAddr and BindPort are where gossip listens (UDP and TCP). BindAddr
	// is an IP address (a name: ErrInvalidConfig). Default 127.0.0.1 and a
	// free port; deployments set a port (memberlist's
	// conventional one is 7946). AdvertiseAddr and AdvertisePort are what the
	// others dial: default the bound ones. A wildcard BindAddr (0.0.0.0, ::)
	// needs an advertise address: AdvertiseAddr, or WithAdvertiseAddr whose
	// host is then used; Join refuses it otherwise (ErrInvalidConfig).
	BindAddr      string
	BindPort      int
	AdvertiseAddr string
	AdvertisePort int

	// Timing is the failure detector's and gossip's timing. Zero means
	// LANGossipTiming().
	Timing GossipTiming

	// Voters tunes how the leader grows and heals the voter set. Zero fields
	// take DefaultVoterPolicy's values.
	Voters VoterPolicy

	// SettleFor: the gossip view must be unchanged this long before a
	// formation decision (default 3 probe intervals). ReconcileEvery: how
	// often the leader reconsiders the configuration (default 1 s; also on
	// every membership event).
	SettleFor      time.Duration
	ReconcileEvery time.Duration
}

// GossipTiming holds the failure detector's and gossip's knobs (memberlist's).
// A member that stops answering is declared failed after roughly
// ProbeInterval + SuspicionMult*log10(N+1)*ProbeInterval. Shorter intervals
// detect failures sooner but cost more traffic and give more false positives
// under GC pauses or CPU starvation. The fields are documented on
// membership.Timing, which this names.
type GossipTiming = membership.Timing

// LANGossipTiming is the default: memberlist's LAN timing (probe every 1 s
// with a 500 ms timeout, suspicion ×4, push/pull every 30 s) but for gossip
// every second to 3 members (memberlist's LAN: 200 ms; its WAN: 500 ms),
// dead names reclaimable after 30 s, seeds retried from 1 s, failed and
// left members forgotten after 72 h. The gossip ticker was the most frequent
// wake-up of an idle light member: in a fleet of 50, gossip every second
// instead of every 500 ms took a light member from 42–43 to 34–35 context
// switches a second (0.145–0.159 → 0.111–0.117 % of a core), and every
// 200 ms → 500 ms had taken a 10-member fleet's from 81 to 54. News (joins,
// suspicions, deaths, metadata) also rides on every probe and ack a member
// sends: a metadata update reached all 49 others of a fleet of 50 in 2 s
// (median 1 s; every 500 ms: within 1.0–1.5 s, median 0.4–1.0 s), inside
// the suspicion timeout a suspected member has to refute (≥ 4 probe
// intervals); a fleet of 50 formed 2–3 s later. Set GossipInterval to
// 200 ms for memberlist's pace.
func LANGossipTiming() GossipTiming { return membership.LANTiming() }

// FastGossipTiming is for tests and demos on loopback: failures are detected
// in well under a second. Never use it across a real network.
func FastGossipTiming() GossipTiming { return membership.FastTiming() }

// VoterPolicy tunes how the leader manages the raft configuration of a
// gossip fleet: how long a member must be healthy before it is added or
// promoted, how long a voter or learner must be failed before it is
// removed, how far behind counts as caught up, how many warm standbys
// (learners) are kept and how many voters at most. Zero fields take
// DefaultVoterPolicy's values. The fields are documented on
// membership.Thresholds, which this names. A learner costs the leader about
// as much idle CPU as a voter (docs/operations-cost.md).
type VoterPolicy = membership.Thresholds

// DefaultVoterPolicy: stabilize 10 s, dead voter 5 min, dead learner 30 s,
// lag 250 entries, 2 learners, at most 5 voters.
func DefaultVoterPolicy() VoterPolicy { return membership.DefaultThresholds() }

// WithGossip makes Join form and heal the cluster by gossip membership:
// Join's peers are then gossip seeds ("host:port", host may be a DNS name
// with several addresses, e.g. a headless Service). See Gossip.
func WithGossip(g Gossip) Option {
	return func(o *options) {
		o.gossip = &node.GossipConfig{
			Name:            g.Name,
			Founders:        g.Founders,
			BootstrapExpect: g.BootstrapExpect,
			BindAddr:        g.BindAddr,
			BindPort:        g.BindPort,
			AdvertiseAddr:   g.AdvertiseAddr,
			AdvertisePort:   g.AdvertisePort,
			Timing:          g.Timing,
			Thresholds:      g.Voters,
			SettleFor:       g.SettleFor,
			ReconcileEvery:  g.ReconcileEvery,
		}
	}
}
