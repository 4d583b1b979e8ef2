// Package lease is one node's lease engine: the leader's session deadlines,
// per-lock lease deadlines and lock-delay ends, the rule that decides when a
// keepalive may be acknowledged, the checkpoints that carry a session's
// silence across leader changes, and the node memory (contact log, applied
// marks) every replica keeps in case it leads next.
//
// It is a pure core, as lockfsm is, and as etcd keeps its lessor apart from
// the server. It starts no goroutines, never reads a clock (time comes in as
// arguments), draws no random numbers, and nothing it returns depends on map
// order: commands it asks to propose come sorted (sessions by id, leases and
// delays by name and token). Its owner (the node's loop) calls every method
// from one goroutine, proposes the commands the engine returns, feeds back
// what it applies (OnEvent, OnCheckpoint, OnLiftDelay), and carries the
// engine's extensions on raft's heartbeats. The engine reads the lock table
// and the version gate through Host.
//
// Keepalives are answered through a reply function each carries
// (Keepalive.Reply): the engine calls it exactly once, synchronously, from
// within one of its methods (at once, or later when a revive applies, the
// session ends or this node stops leading). It never holds or sends on a
// channel.
//
// # Carrying a session's silence across leader changes (L3 under churn)
//
// Only the leader keeps session deadlines, on its monotonic clock, and
// keepalives are not logged. A leader that takes over must still expire a
// crashed holder's session within TTL (plus one election) of the holder's
// last keepalive, however many leaders came before it, and never before the
// holder itself gives up (S5). Restarting every deadline from the new
// leader's first entry (etcd's Promote, Consul) is safe but loses the whole
// failover, every failover: under churn a crashed holder's locks were held
// for ever.
//
// The quantity a leader needs per session is its base: a moment no
// keepalive of that session acknowledged by any leader, this one or an
// earlier one, was received after. The session expires at base + TTL.
//
// S5 holds if every leader's base is never earlier than the receive time r
// of any acknowledged keepalive: the holder counts its own deadline from the
// keepalive's send time s < r, minus the drift margin (the node's
// holderMargin), so it gives up before base + TTL. Durations measured on one
// node's clock and used on another's differ by at most DriftRatio; the margin
// covers that, as it covers the TTL itself today. Two facts the rest leans
// on:
//
//	(F1) A keepalive is acknowledged only after a ReadIndex round issued
//	     after it arrived has been answered by a quorum (the node's
//	     confirmation rounds): a quorum Q received a heartbeat of the
//	     acknowledging leader's term after r.
//	(F2) Raft: a quorum of the configuration in force when a later leader
//	     was elected (the election configuration E) intersects Q, the same
//	     intersection that makes ReadIndex linearizable and that the
//	     confirmation rounds already rely on.
//
// A new leader takes, per session, the earliest base it can prove, from two
// sources, and uses the earlier (the minimum of two valid bounds is valid).
//
// 1. Contact reports (contact.go, heartbeat.go). Every node remembers, per
// session, when it last saw that session in a confirmation round (the
// round's heartbeat carries the sessions of its waiters), tagged with the
// round's term, and when it last heard from any leader; a leader records its
// own rounds when it issues them. A node that restarted knows nothing older
// than its start, and reports its start time for what it has not seen
// since. The new leader of term T flags its first rounds; a follower at term
// T answering such a heartbeat appends, per session, how long ago it last
// saw it in a round of a term below T. For each session the leader takes,
// among the reports of the voters of E (itself included), the k-th smallest
// value, k a majority of E. By F1 every member of Q saw the session at or
// after r (or restarted after r and reports its start), by F2 at most
// |E| − k < k reporters are outside Q, so the k-th smallest is ≥ r. A report
// is only taken from a follower already at term T: it rejects every
// heartbeat of an older leader from then on, so no older round can complete
// with it after it reported. For a crashed holder the reports give (about)
// the receive time of its last keepalive: the failover costs nothing, even
// when the leader that saw that keepalive died right after it. The holder
// also counts from the send of its OpenSession, which no round names: the
// base never goes below the earliest time a reporter applied that entry
// (after its commit, so after the send; a reporter that restarted since
// only knows its replay, later). Leases use the same reports' "any leader
// contact" value (renewals go through the same rounds), lock-delays the
// local apply time of the expiry that started them.
//
// 2. Checkpoints in the log (lockfsm.KindCheckpoint, duties.go), for when
// the reports cannot say (a majority restarted since). A leader proposes,
// for every session silent longer than SilenceThreshold (and, after its
// reports, for every session it has not heard from), a mark with the
// silence σ = now − base it measured, and repeats it every
// checkpointPeriod while the session stays silent. Each node notes its own
// monotonic time a when it applies a mark (node memory, not lockfsm state;
// after a restart or a snapshot restore, the time it loaded the state) and
// keeps, per session, the earliest a − σ of the silent marks it applied
// since the session's last revive; a later leader takes that as the base.
// Since a is after the proposal, a − σ is never earlier than the proposer's
// base, and so never earlier than any keepalive acknowledged before the
// proposal. (Each of those marks is a valid bound on its own while no
// revive follows it. Taking the latest mark's alone loses the election
// whenever the old leader died between proposing a mark and the followers
// learning it committed: the new leader then applies it at its own first
// entry.) For keepalives acknowledged after a mark, the rule:
//
//	(R) Once a leader has proposed a mark for a session, it acknowledges a
//	    keepalive of that session received after the mark's base only after
//	    a later Live mark for it (a revive), proposed by itself, has been
//	    applied on itself. A leader that inherits a mark from the log
//	    acknowledges nothing for that session before its own revive is
//	    applied (its a differs from the proposer's).
//
// So if the latest mark a later leader applies for a session is a silent
// one, no keepalive received after its base was acknowledged by anyone: an
// acknowledgement would have needed a revive applied after it, which every
// later leader has (it is committed, and a leader applies every committed
// entry before it arms anything). If the latest is a revive (or there is
// none), the log gives no bound and the leader uses the reports, or its own
// first entry. A revive therefore does not mean "silence 0 at apply time":
// that would let a leader expire a session whose holder was acknowledged
// after the revive (the holder keeps sending for a TTL after it).
//
// With a mark applied promptly by every replica, a failover costs only the
// time from proposing the latest mark to applying it (a commit), not the
// election; the marks are re-proposed while the session stays silent so
// that a replica which restarted meanwhile does not fall back to its
// restart time.
//
// The bound (L3). A crashed holder's lock is granted TTL after its last
// keepalive, plus the time the cluster had no leader after that deadline
// (the election in progress then: under 2 election timeouts unless raft
// needs a second round), plus a few round trips and fsyncs. One corner costs
// up to SilenceThreshold more: the leader that saw the last keepalive is
// lost before its first mark for the session commits (so every replica
// applies that mark only at the next leader's first entry), and a voter of
// the next leader's reporting majority restarted after the keepalive (its
// report can only say "not since my start"). The node's
// TestCrashedHolderReleasedUnderLeaderChurn and the chaos fault leader-churn
// check this bound.
package lease
