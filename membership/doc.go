// Package membership discovers lockraft replicas by gossip
// (hashicorp/memberlist) and advises, as pure functions, when to bootstrap
// raft and how to change the voter set. It imports nothing of lockraft and
// never touches raft itself: the node package acts on what it reports.
//
// # Gossip
//
// Start runs one member. Each carries Meta (raft ID, gRPC address, cluster
// ID, version, whether it has raft data, formation id) in memberlist's node metadata
// (at most 512 bytes, versioned encoding). Members of another cluster are kept
// out twice: by the gossip Label (packets with another label are dropped) and
// by the ClusterID in Meta (such members are refused and logged once at Warn,
// naming both IDs; a join that would merge two clusters is cancelled).
// Undecodable metadata gets the same treatment. With SecretKey set, gossip is
// AES-GCM encrypted and authenticated; a member with another key cannot join
// and memberlist's decryption errors appear in the Logger.
//
// # Failure means "suspected", not "dead"
//
// StateFailed / EventFailed is memberlist's "dead": the member did not answer
// direct and indirect probes for the suspicion timeout. GC pauses, CPU
// starvation and partial partitions produce it for live members. It is a
// health hint. No raft voter may be removed on it alone: PlanVoters requires
// the leader's raft progress to agree, for a long threshold, and a healthy
// quorum to remain.
//
// # Events
//
// Config.Events receives Join, Update, Leave and Failed events in the order
// this member observed them. Sends never block memberlist: a full channel
// drops the event (Membership.Dropped counts them, and each drop is logged),
// so the consumer treats events as a wake-up and re-reads Members() as the
// source of truth.
//
// # Forming, growing, healing (for the node integration)
//
// PlanFormation: only the founder (of a configured list of gossip names)
// whose name sorts first ever starts forming, once it sees every founder
// alive and no member with raft data or another formation; the node then
// asks each founder directly before it bootstraps
// (node/internal/fleet/formation.go). A count of visible members is not
// used: two islands can each see enough.
//
// PlanVoters runs on the raft leader only, each round after the previous
// change has applied. It returns at most one change: drop dead or surplus
// learners, replace a voter that both gossip and raft progress have seen
// failed for DeadVoterAfter (only with a ready learner or a surplus of
// voters, never below a healthy quorum), promote a learner that has been
// healthy and caught up for StabilizeFor up to targetVoters (3, 5, at most 7,
// odd), and keep MaxLearners warm standbys (negative: none; a learner is
// then added only to grow the voters or replace a failed one).
//
// # Fleet scale
//
// A fleet of 50–100 instances must not cost the leader a replica stream per
// instance. Only the voters (3–7) and a few learners (warm standbys, default
// 2) are in the raft configuration. Every other instance is a light member:
// it is in gossip (so it knows the voters' gRPC addresses and the leader) but
// not in raft. Its lock calls are forwarded to the leader over gRPC, and the
// leader pushes grants (and session-loss notices) back to it on a stream, so
// the leader's per-instance cost is one idle stream plus the operations the
// instance actually makes, not a copy of the log. When a voter dies, a warm
// learner is promoted; a light member becomes a learner (and catches up from a
// snapshot) only to refill the standbys.
//
// # Concurrency
//
// All Membership methods are safe for concurrent use. PlanFormation,
// PlanVoters and targetVoters are pure and safe anywhere.
package membership
