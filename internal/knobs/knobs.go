// Package knobs holds the testing knobs of one lockraft node: planted bugs
// that show a checker catches what it claims to, the seams where tests plug
// an in-memory network, a fault-injecting network or a failing disk in, and
// observers that benchmarks read. A node holds its knobs in an unexported
// field of its Config; this package is internal, so nothing outside this
// module can set them. The zero value (and a nil *Node) is the production
// behaviour.
package knobs

import (
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/raftlog"
	"github.com/lockraft/lockraft/transport"
)

// Node is one node's knobs. A Node is read, never written, by the node it
// is planted in; hook functions are called from the node's goroutines and
// must be safe for concurrent use.
type Node struct {
	// Network starts the node's network instead of the gRPC transport
	// (transport.Start): an in-memory network, or a fault-injecting wrapper
	// around either.
	Network transport.NewNetwork
	// WrapLog, if set, wraps the node's raft log when it is opened: a disk
	// that fails writes, for instance.
	WrapLog func(raftlog.Log) raftlog.Log

	// Paused, if set, is called where a stopped process (SIGSTOP, a long
	// GC pause) would stand still: at the top of every loop turn, before
	// every raft log write and before every keepalive. It returns once the
	// node may go on (or stop is closed).
	Paused func(stop <-chan struct{})
	// LoopPaused, if set, is called at the top of every loop turn only, as a
	// long synchronous disk write inside the loop would stall it while the
	// keepalive sender and the transport go on.
	LoopPaused func(stop <-chan struct{})
	// FSMCommitError, if set, is asked before every lock-table commit (the
	// periodic write of lockfsm's dirty records); a non-nil error fails it
	// as a failing disk would.
	FSMCommitError func() error
	// SnapshotStall, if set, is called before the disk work of every
	// lock-table snapshot, as a very slow disk would stall it.
	SnapshotStall func(stop <-chan struct{})
	// DropPushes, if set and true, makes a light member refuse every push
	// and ignore the results in its forwarded proposals' answers, so that
	// only its status calls inform it.
	DropPushes func() bool

	// Stages, if set (the same observer on every node of a cluster), is
	// told when each log entry passes each stage on each node.
	Stages Stages
	// OnLoopStart, if set, runs on the loop goroutine before its first
	// turn (a benchmark pins the loop to its OS thread there).
	OnLoopStart func()

	// ClaimVersion, if set, is the version the node tells its peers instead
	// of its own ("-": none at all, as a build from before the header): an
	// older member in a rolling upgrade.
	ClaimVersion string

	// Planted bugs. Each breaks one promise; the zero value keeps them all.
	//
	// AckBeforeFsync sends the node's acknowledgements (MsgAppResp, votes)
	// before the Ready's entries and HardState are written (S3).
	AckBeforeFsync bool
	// FollowerExpiry makes followers expire other members' sessions on their
	// own clocks, which no keepalive moves (S5).
	FollowerExpiry bool
	// WallClockDeadline compares the holder-side deadlines without their
	// monotonic reading, as deadlines stored as UnixNano would be (S5 under
	// a wall clock that steps back).
	WallClockDeadline bool
	// AckWhileMarked breaks rule (R) of the lease engine: the leader
	// acknowledges keepalives of a session it marked silent without a
	// revive first (S5).
	AckWhileMarked bool
	// ReviveAsSilenceZero reads a revive as "silent 0 ms at its apply time"
	// instead of "no bound in the log" (S5).
	ReviveAsSilenceZero bool
	// RestartDeadlinesOnFailover restarts every session deadline from a new
	// leader's first entry, as etcd and Consul do (L3 under leader churn).
	RestartDeadlinesOnFailover bool
	// FSM plants bugs in the node's lock table (S1). They reach lockfsm only
	// in builds with the lockraft_planted tag; without it a node refuses to
	// start with any of them set.
	FSM FSM
}

// FSM is the lock table's planted bugs, each an S1 violation.
type FSM struct {
	GrantWhileHeld     bool // an exclusive acquire granted while another owner holds
	ReaderBesideWriter bool // a reader granted beside a writer
	PermitOverN        bool // a semaphore grants one permit over its limit
	PartialMultiGrant  bool // a multi-name grant takes only its first name
}

// Any reports whether any bug is planted.
func (f FSM) Any() bool { return f != FSM{} }

// Stage is a point an entry passes on its way through a cluster.
type Stage int

const (
	StageCalled   Stage = iota // the caller's Acquire or Release began
	StageProposed              // its loop proposed the command
	StageAppended              // the loop handed the entry to the appender
	StageSent                  // the leader's loop handed a MsgApp carrying it to the transport
	StageReceived              // a follower's transport handler got the MsgApp
	StageDurable               // the appender's fdatasync returned
	StageAcked                 // the leader got this follower's acknowledgement
	StageApplied               // the loop applied the entry
	StageReturned              // the caller got its result
	NumStages
)

// Stages observes entries passing stages. Its methods are called from the
// nodes' goroutines concurrently and must not block.
type Stages interface {
	// Stamp records that entry index passed stage on node at t.
	Stamp(node, index uint64, stage Stage, t time.Time)
	// Ack is a follower's acknowledgement as the leader steps it.
	Ack(m *raftpb.Message)
	// Returned records a caller's command of index once its result is back:
	// when the call began and when its loop proposed it.
	Returned(node, index uint64, called, proposed time.Time)
}

// plant is installed by package node: it sets k on a *node.Config.
var plant func(cfg any, k *Node)

// Install is called once by package node with the function that plants
// knobs in its Config.
func Install(f func(cfg any, k *Node)) { plant = f }

// Plant sets k as the knobs of cfg, a *node.Config (tests outside package
// node; package node's own tests set the field directly).
func Plant(cfg any, k *Node) { plant(cfg, k) }
