package node

import (
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/lockraft/lockraft/internal/knobs"
	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/node/internal/fleet"
	"github.com/lockraft/lockraft/transport"
)

// Member is one founding voter of a statically configured cluster.
type Member struct {
	ID   uint64 // raft id: non-zero, unique, never reused
	Addr string // gRPC address other nodes dial
}

// GossipConfig turns on gossip membership (Config.Gossip): the node finds
// the others through Seeds, the named Founders form the cluster once they
// all see each other, and the leader grows and heals the voter set by
// itself. It is membership's Config, declared once there: the node sets
// Meta, Logger and Events itself, and binds 127.0.0.1 when BindAddr is
// empty. Without Keys or SecretKey gossip is plaintext: allowed on
// loopback, elsewhere only with Config.Insecure. Gossip is also labelled
// with the cluster id, so two clusters never merge.
type GossipConfig = membership.Config

// Config configures one node. Zero fields take the defaults documented on
// each field; Validate reports the first field out of range, wrapping
// lockerr.ErrInvalidConfig. A Config is copied by Start; later changes have no effect.
type Config struct {
	// ID is this node's raft id. Required with static Members; it is stored
	// in the data directory, and a restart with a different ID is refused.
	ID uint64

	// ClusterID names the cluster. Nodes reject raft traffic and calls from
	// another cluster, and refuse a data directory created for another one.
	// Default "lockraft", for loopback only: a node reachable from other
	// hosts must be given its cluster's id (two clusters left at the default
	// would accept each other's traffic). With TLS it is the host part of
	// the member certificates' URI (transport.MemberURI), so a DNS-style
	// name: letters, digits, '-' and '.'.
	ClusterID string

	// DataDir holds the raft log (wal/ or raft.db, see LogEngine), the lock
	// table (locks.db), snapshots (snap/) and the node identity (node.id).
	// Required.
	DataDir string

	// LogEngine selects the raft log: logEngineWAL ("wal", DataDir/wal/, one
	// fdatasync per group of Readys) or logEngineBbolt ("bbolt", DataDir/raft.db, a bbolt
	// transaction per group). Empty (the default) keeps the engine of existing
	// data (raft.db present: bbolt) and uses the WAL for a new directory. An
	// engine that does not match existing data is refused (lockerr.ErrDataDir).
	LogEngine string

	// ListenAddr is the gRPC address to listen on (default 127.0.0.1:0), or
	// Listener an already bound listener (it takes precedence).
	ListenAddr string
	Listener   net.Listener

	// AdvertiseAddr is the gRPC address the other members dial to reach this
	// node ("host:port", or "host" to keep the bound port). Default: the
	// bound address. Required when ListenAddr (or Listener) binds every
	// interface (0.0.0.0, [::], ":port"): Validate refuses that without it
	// (advertise.go). With Gossip binding a wildcard too, its host is also the
	// gossip advertise host unless Gossip.AdvertiseAddr is set.
	AdvertiseAddr string

	// Members lists the founding voters, this node included. It is used only
	// when the data directory is empty; a restart with data never
	// re-bootstraps. Every founding node must be given the same list.
	Members []Member

	// Gossip, when set (and Members empty), forms and heals the cluster by
	// gossip membership instead; ID may then be 0: a random id is generated
	// on first start and kept in the data directory.
	Gossip *GossipConfig

	// TickInterval is one raft tick (default 100 ms). ElectionTicks (default
	// 10) and HeartbeatTicks (default 2, or 1 when ElectionTicks is below
	// 10) are counted in ticks, as in etcd:
	// a follower campaigns after a randomized [1, 2) election timeouts
	// without hearing from a leader.
	TickInterval   time.Duration
	ElectionTicks  int
	HeartbeatTicks int

	// SessionTTL is how long the cluster keeps this node's session (and so
	// its locks) after the last keepalive it received (default 10 s), however
	// often the leader changes meanwhile. KeepaliveInterval (default
	// SessionTTL/4, shortened down to SessionTTL/10 where a quarter would
	// fail the failover check below) is how often keepalives are sent; a
	// new leader is sent one at once. The holder side treats its locks as lost at
	// SessionTTL − 2·DriftRatio·SessionTTL − one tick after sending its last
	// acknowledged keepalive (see DriftRatio).
	//
	// Failovers: each one leaves a healthy session unacknowledged for up to
	// one election (2 election timeouts, plus a few round trips and fsyncs).
	// A session survives N back-to-back failovers (each new leader lost
	// before it acknowledged anyone) when
	//
	//	SessionTTL·(1 − 2·DriftRatio) − TickInterval − KeepaliveInterval > N × (2 election timeouts + δ)
	//
	// Validate requires the left side to be at least 4.5 election timeouts:
	// two back-to-back failovers. With the default KeepaliveInterval and
	// DriftRatio that is SessionTTL ≥ 5.4 election timeouts (MinSessionTTL):
	// 5.4 s with the default timings. The default 10 s TTL (keepalives every
	// 2.5 s) survives three.
	SessionTTL        time.Duration
	KeepaliveInterval time.Duration
	// TryLockTimeout bounds how long a TryLock (an Acquire without wait)
	// waits for its answer before it returns lockerr.ErrUnavailable: a cluster
	// without a leader answers nothing. Default (0): two election timeouts.
	TryLockTimeout time.Duration

	// DriftRatio bounds how far the rates of two nodes' monotonic clocks may
	// differ (default 0.02, i.e. 2%; NTP-disciplined clocks differ by parts
	// per million). The holder-side loss deadline is shortened by twice this
	// share of the TTL so that it fires before the leader's deadline.
	DriftRatio float64

	// LockDelay: after a session expires while holding a lock (not after a
	// clean Unlock or Close), that name is not granted again for this long
	// (default 0: off). As with Chubby and Consul, it keeps a slow, partitioned
	// holder from overlapping with the next one when fencing is not used.
	LockDelay time.Duration

	// Quotas the leader enforces on what members ask of it (privilege.Quotas): the
	// sessions open at once for one member (0: DefaultMaxSessionsPerMember)
	// and the names one session of a member holds or waits for at once (0:
	// DefaultMaxLocksPerSession). A request beyond one is refused with
	// lockerr.ErrQuotaExceeded.
	MaxSessionsPerMember int
	MaxLocksPerSession   int
	// MaxHolds is the maximum reentrant hold depth of one owner on one name
	// (default 64).
	MaxHolds uint32

	// RetryInterval: a proposal whose result has not been applied after this
	// long is proposed again (idempotently: same session and sequence
	// number). Default 5 ticks.
	RetryInterval time.Duration

	// SnapshotEvery: take a lock-table snapshot and compact the raft log
	// every this many applied entries (default 10,000, as etcd), keeping
	// CompactKeep entries (default 5,000) for slow followers. A table with
	// more records (sessions and names) than that is snapshotted every as
	// many entries as it has records instead, up to ten times SnapshotEvery:
	// a snapshot writes the whole table, and so its cost is spread over more
	// entries, while the log kept in memory between snapshots stays bounded.
	SnapshotEvery uint64
	CompactKeep   uint64

	// SessionEndRun: a session that ends (closed or expired) holding or
	// waiting for more names than this ends over several raft entries of at
	// most this many names each, so that no one entry holds every replica's
	// apply loop for long (default lockfsm.DefaultSessionEndRun, 512:
	// about 1 ms of apply). Used once every member runs 0.3 or later.
	SessionEndRun int

	// CommitInterval: the lock table is written to its bbolt file at most
	// this often (default 100 ms, as etcd's backend). The raft log is the
	// durability source; a restart replays the entries after the last commit.
	CommitInterval time.Duration

	// Clock is the time source (default systemClock). Tests inject others.
	Clock Clock

	// Logger receives structured logs (default: discarded).
	Logger *slog.Logger

	// Security (security.go). TLS turns on mutual TLS between members: the
	// cluster's CA and this member's certificate, which must name it
	// (transport.MemberURI; with Gossip and ID 0 the id is taken from it).
	// Without TLS a node listens only on loopback addresses unless Insecure
	// is set, which it then logs loudly: every peer's identity is then a
	// claim nobody checks. Insecure also allows gossip without keys off
	// loopback. MaxSnapshotSize bounds a snapshot received from the leader
	// (default 1 GiB). DenyListFile, if set, names the deny-list of
	// certificate serials and member ids refused on every handshake
	// (transport.Config.DenyListFile).
	TLS             *transport.TLS
	Insecure        bool
	MaxSnapshotSize int64
	DenyListFile    string

	// Observer, if set, is called on the loop goroutine for every lock
	// command this node applies, with its result and events, in log order,
	// before this node answers any call the entry completes (a call that
	// returned was observed).
	// It must not block or retain the record's slices. Every replica applies
	// the same log, so one node's observer sees the cluster's history: used
	// by tests and checkers (FIFO order, token order) and for metrics.
	Observer func(ApplyRecord)

	// Metrics, if set, receives latencies from the hot paths (commit, fsync,
	// forward, grant after head of queue). Nil (the default) costs one nil
	// check per use. See MetricsHooks.
	Metrics *MetricsHooks

	// NoCommitHints turns commit hints off (commithint.go): followers learn
	// commits only from the leader's commit index, as in plain Raft.
	NoCommitHints bool

	// knobs are this node's testing knobs (internal/knobs): planted bugs,
	// the network and log seams, observers. nil in production.
	knobs *knobs.Node
}

// ApplyRecord is one applied lock command as an Observer sees it.
type ApplyRecord struct {
	Index   uint64
	Command *lockfsm.Command
	Result  lockfsm.Result
	Events  []lockfsm.Event
}

// Defaults.
const (
	defaultClusterID    = "lockraft"
	DefaultTickInterval = 100 * time.Millisecond
	defaultSessionTTL   = 10 * time.Second
	DefaultMaxHolds     = 64
	// A member opens one session per incarnation, and a restart ends the
	// previous one at once: 16 leaves room for restarts in a row while
	// bounding what a member can make every replica keep.
	DefaultMaxSessionsPerMember = 16
	// Room for the million held locks a single session may take in the
	// benchmarks.
	DefaultMaxLocksPerSession = 1 << 20
	DefaultDriftRatio         = 0.02
	// maxNameLen and maxOwnerLen bound lock names and owners in bytes.
	maxNameLen  = 512
	maxOwnerLen = 256
)

// withDefaults returns a copy with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.ClusterID == "" {
		c.ClusterID = defaultClusterID
	}
	if c.ListenAddr == "" && c.Listener == nil {
		c.ListenAddr = "127.0.0.1:0"
	}
	if c.TickInterval == 0 {
		c.TickInterval = DefaultTickInterval
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = 10
	}
	if c.HeartbeatTicks == 0 {
		c.HeartbeatTicks = defaultHeartbeatTicks(c.ElectionTicks)
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = defaultSessionTTL
	}
	if c.DriftRatio == 0 {
		c.DriftRatio = DefaultDriftRatio
	}
	if c.KeepaliveInterval == 0 {
		c.KeepaliveInterval = c.defaultKeepaliveInterval()
	}
	if c.MaxSessionsPerMember == 0 {
		c.MaxSessionsPerMember = DefaultMaxSessionsPerMember
	}
	if c.MaxLocksPerSession == 0 {
		c.MaxLocksPerSession = DefaultMaxLocksPerSession
	}
	if c.MaxHolds == 0 {
		c.MaxHolds = DefaultMaxHolds
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = 5 * c.TickInterval
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = 10000
	}
	if c.CompactKeep == 0 {
		c.CompactKeep = 5000
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = 100 * time.Millisecond
	}
	if c.SessionEndRun == 0 {
		c.SessionEndRun = lockfsm.DefaultSessionEndRun
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate checks a Config after defaults are applied.
func (c Config) Validate() error {
	clusterSet := c.ClusterID != ""
	c = c.withDefaults()
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", lockerr.ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	if c.DataDir == "" {
		return bad("DataDir is required")
	}
	if c.LogEngine != "" && c.LogEngine != logEngineWAL && c.LogEngine != logEngineBbolt {
		return bad("LogEngine %q is not %q or %q", c.LogEngine, logEngineWAL, logEngineBbolt)
	}
	if len(c.ClusterID) > 128 {
		return bad("ClusterID longer than 128 bytes")
	}
	if c.TickInterval < time.Millisecond || c.TickInterval > 10*time.Second {
		return bad("TickInterval %v outside [1ms, 10s]", c.TickInterval)
	}
	if c.HeartbeatTicks < 1 || c.ElectionTicks <= c.HeartbeatTicks {
		return bad("ElectionTicks (%d) must exceed HeartbeatTicks (%d) >= 1", c.ElectionTicks, c.HeartbeatTicks)
	}
	election := time.Duration(c.ElectionTicks) * c.TickInterval
	if c.SessionTTL > maxSessionTTL {
		return bad("SessionTTL %v is longer than %v", c.SessionTTL, maxSessionTTL)
	}
	if c.MaxSnapshotSize < 0 {
		return bad("MaxSnapshotSize %d is negative", c.MaxSnapshotSize)
	}
	if err := c.checkSecurity(clusterSet); err != nil {
		return err
	}
	if err := c.checkAdvertise(); err != nil {
		return err
	}
	if c.TryLockTimeout < 0 {
		return bad("TryLockTimeout %v is negative", c.TryLockTimeout)
	}
	if c.KeepaliveInterval <= 0 || c.KeepaliveInterval > c.SessionTTL/3 {
		return bad("KeepaliveInterval %v must be in (0, SessionTTL/3]", c.KeepaliveInterval)
	}
	if c.DriftRatio < 0 || c.DriftRatio >= 0.25 {
		return bad("DriftRatio %v outside [0, 0.25)", c.DriftRatio)
	}
	if spare := c.SessionTTL - c.holderMargin() - c.KeepaliveInterval; spare < failoverBudget(election) {
		return bad("SessionTTL %v is too short for election timeouts of %v: after the drift margin (%v) and a keepalive interval (%v) it leaves %v, and two back-to-back leader failovers take up to %v (4.5 election timeouts); healthy sessions would expire (the minimum with the default KeepaliveInterval is %v: MinSessionTTL)",
			c.SessionTTL, election, c.holderMargin(), c.KeepaliveInterval, spare, failoverBudget(election), MinSessionTTL(election))
	}
	if c.LockDelay < 0 || c.LockDelay > time.Minute {
		return bad("LockDelay %v outside [0, 1m]", c.LockDelay)
	}
	if c.MaxSessionsPerMember < 0 || c.MaxSessionsPerMember > 1<<16 {
		return bad("MaxSessionsPerMember %d outside [1, %d]", c.MaxSessionsPerMember, 1<<16)
	}
	if c.MaxLocksPerSession < 0 || c.MaxLocksPerSession > 1<<24 {
		return bad("MaxLocksPerSession %d outside [1, %d]", c.MaxLocksPerSession, 1<<24)
	}
	if c.MaxHolds > 1<<20 {
		return bad("MaxHolds %d above %d", c.MaxHolds, 1<<20)
	}
	if c.RetryInterval < c.TickInterval {
		return bad("RetryInterval %v shorter than one tick", c.RetryInterval)
	}
	if c.CompactKeep >= c.SnapshotEvery*10 {
		return bad("CompactKeep %d is not sensible for SnapshotEvery %d", c.CompactKeep, c.SnapshotEvery)
	}
	if c.SessionEndRun < 0 || c.SessionEndRun > 1<<20 {
		return bad("SessionEndRun %d outside [1, %d]", c.SessionEndRun, 1<<20)
	}
	if c.CommitInterval < time.Millisecond {
		return bad("CommitInterval %v below 1ms", c.CommitInterval)
	}
	if len(c.Members) > 0 {
		seen := map[uint64]bool{}
		self := false
		for _, m := range c.Members {
			if m.ID == 0 {
				return bad("member with id 0")
			}
			if seen[m.ID] {
				return bad("member id %016x listed twice", m.ID)
			}
			seen[m.ID] = true
			if m.Addr == "" {
				return bad("member %016x has no address", m.ID)
			}
			self = self || m.ID == c.ID
		}
		if !self {
			return bad("ID %016x is not among Members", c.ID)
		}
	}
	if c.Gossip != nil {
		if len(c.Members) > 0 {
			return bad("Members (static) and Gossip are mutually exclusive")
		}
		if err := fleet.CheckGossip(c.Gossip); err != nil {
			return fmt.Errorf("%w: %w", lockerr.ErrInvalidConfig, err)
		}
		return nil
	}
	if c.ID == 0 {
		return bad("ID is required")
	}
	return nil
}

// defaultHeartbeatTicks: a heartbeat every 2 ticks (five per election
// timeout at the default 10) when the election timeout is at least 10
// ticks, else every tick. Every heartbeat wakes every follower, and with
// the keepalives' confirmation rounds riding on them (confirm.go) they are
// most of an idle replica's wake-ups: with a beat per tick a 3-member
// cluster's idle followers cost about a fifth more CPU (bench/cmd/embedcost). Five beats per timeout
// still leave a follower four lost heartbeats before it campaigns.
func defaultHeartbeatTicks(electionTicks int) int {
	if electionTicks >= 10 {
		return 2
	}
	return 1
}

// heartbeatInterval is the leader's heartbeat period.
func (c Config) heartbeatInterval() time.Duration {
	return time.Duration(c.HeartbeatTicks) * c.TickInterval
}

// electionTimeout is the base election timeout.
func (c Config) electionTimeout() time.Duration {
	return time.Duration(c.ElectionTicks) * c.TickInterval
}

// holderMargin is how much earlier than the leader the holder gives up:
// twice the drift share of the TTL (the holder's clock may run slow and the
// leader's fast) plus one tick for the time between a timer firing and the
// handle being cancelled.
func (c Config) holderMargin() time.Duration {
	return time.Duration(2*c.DriftRatio*float64(c.SessionTTL)) + c.TickInterval
}

// keepaliveTimeout is how long a keepalive may wait for its answer. Longer
// than the interval: under load a confirmation round can take longer than
// KeepaliveInterval, and an answer that comes late still counts from the
// time the keepalive was sent (so waiting is always safe). A quarter of the
// TTL leaves time for the next keepalive to reach a new leader.
func (c Config) keepaliveTimeout() time.Duration {
	return max(c.KeepaliveInterval, c.SessionTTL/4)
}

// defaultKeepaliveInterval is SessionTTL/4, shortened where that would
// leave less than the failover budget (Validate), down to SessionTTL/10.
//
// Why a quarter: each keepalive is a call to the leader and a confirmation
// round there, and one a second from every member was a third of an idle
// light member's wake-ups and most of a big fleet's leader's
// (bench/cmd/embedcost). A quarter of the TTL is the longest interval that
// still leaves a session three back-to-back failovers at the default
// timings (10 s TTL, 1 s election timeout: 9.6 − 0.1 − 2.5 = 7 s, against
// 2.25 s per failover); etcd and Redisson renew at a third, ZooKeeper
// pings at a third. What a longer interval costs: a silent session is
// checkpointed after two intervals (silenceThreshold), so the rare corner
// of L3 that waits for it (node/internal/lease) is longer, and a light
// member finds a dead leader at its next keepalive.
func (c Config) defaultKeepaliveInterval() time.Duration {
	ttl := c.SessionTTL
	room := ttl - c.holderMargin() - failoverBudget(c.electionTimeout())
	return max(min(ttl/4, room), ttl/10)
}

// failoverBudget is how long a healthy session must be able to go
// unacknowledged: two back-to-back elections of up to 2 election timeouts
// each, and half an election timeout for their round trips and fsyncs.
func failoverBudget(election time.Duration) time.Duration { return 9 * election / 2 }

// MinSessionTTL is the shortest SessionTTL Validate accepts for an election
// timeout (ElectionTicks × TickInterval) with a KeepaliveInterval of
// SessionTTL/10 (the shortest the default ever is), the default DriftRatio
// and TickInterval (election/10): 5.4 election timeouts, enough for a
// healthy session to survive two back-to-back leader failovers.
func MinSessionTTL(election time.Duration) time.Duration {
	// TTL·(1 − 2·DefaultDriftRatio) − election/10 − TTL/10 ≥ 4.5·election
	f := 1 - 2*DefaultDriftRatio - 0.1
	ttl := time.Duration(float64(failoverBudget(election)+election/10) / f)
	step := max(election/10, 1)
	return (ttl + step - 1) / step * step
}

// maxSessionTTL bounds a session's TTL: a session (and the locks of a
// crashed holder) never outlives its last keepalive by more than this.
const maxSessionTTL = time.Hour

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
	// Keepalive: one acknowledged keepalive of this node's session, from
	// its send to the leader's answer (on the leader itself: to its
	// quorum's confirmation). A leader slow to answer a burst of its
	// members' keepalives shows here first.
	Keepalive func(time.Duration)
	// QueueHead ("grant after head of queue"): for an Acquire of this node
	// that queued, from the apply of the entry that made it the head of its
	// name's queue to the apply of the entry that granted it, on this node's
	// clock: how long it waited for the holder alone, not behind other
	// waiters. Raft members only (a light member does not apply the log).
	QueueHead func(time.Duration)
}
