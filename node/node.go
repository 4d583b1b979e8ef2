// Package node runs one lockraft replica: a single goroutine owns the
// raft.RawNode and the lock table, and everything else (the public API, the
// transport, the keepalive sender) talks to it through channels.
//
// Raft runs with AsyncStorageWrites (raft-guide.md §1, raft doc.go): per
// Ready the loop sends every outgoing message at once (a leader's appends
// before its own fsync, Raft thesis §10.2.1), hands the snapshot, entries and
// HardState to the appender goroutine, which saves everything queued in one
// raftlog Save (with the default WAL engine one write and one fdatasync) and
// only then delivers the acknowledgements, and applies the committed entries
// (only ones already durable here) to lockfsm, handing each result or event
// to the caller waiting for it.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/internal/knobs"
	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/node/internal/campaign"
	"github.com/lockraft/lockraft/node/internal/fleet"
	"github.com/lockraft/lockraft/node/internal/forward"
	"github.com/lockraft/lockraft/node/internal/lease"
	"github.com/lockraft/lockraft/node/internal/privilege"
	"github.com/lockraft/lockraft/node/internal/tick"
	"github.com/lockraft/lockraft/raftlog"
	"github.com/lockraft/lockraft/transport"
)

// Node is one replica. Its methods are safe for concurrent use.
type Node struct {
	cfg     Config
	k       *knobs.Node // testing knobs (knobs.go); never nil
	log     *slog.Logger
	id      uint64
	clock   Clock
	snapDir string

	storage raftlog.Log
	fsm     *lockfsm.FSM
	tr      transport.Network
	addr    string           // the advertised gRPC address (advertise.go)
	rn      *raft.RawNode    // owned by the loop goroutine
	fleet   *fleet.Fleet     // cluster management (fleet.go, node/internal/fleet)
	members *fleet.MemberSet // who may send raft messages (the fleet's)
	quota   privilege.Quotas // what members may have the leader hold for them

	reqc  chan request           // work to run inside the loop, in the order sent
	recvc chan []*raftpb.Message // raft messages from the transport
	app   appender               // raft log writes, off the loop (appender.go)
	com   committer              // the lock table's disk work, off the loop (committer.go)
	stopc chan struct{}          // closed by Close / crash to stop the loop
	donec chan struct{}          // closed when the loop has exited
	bgwg  sync.WaitGroup         // keepalive sender and other helpers
	dead  atomic.Pointer[error]  // set once the node stopped serving
	lead  watchedID              // current leader id as last seen by the loop
	sess  watchedID              // current session id (0 until opened)
	// termSeen is raft's term as last handed to the appender (AcceptSnapshot).
	termSeen atomic.Uint64
	// leaderSeen is the last message from a leader, or tick as the leader
	// (leaderfail.go), on the node clock with its monotonic reading.
	leaderSeen laterTime
	// lastSent is the send time of the last keepalive this node sent,
	// acknowledged or not (LastKeepaliveSent), monotonic reading kept.
	lastSent laterTime
	// lastAcked is the send time (node clock, monotonic reading kept) of
	// the last keepalive the leader acknowledged: the base of the holder
	// deadline. It only moves forward; the session's timer, armed for the
	// deadline it last saw, finds the later one when it fires and re-arms.
	lastAcked laterTime
	closing   atomic.Bool // Close has begun: new calls fail with lockerr.ErrClosed

	relearned         atomic.Uint64 // grants learned by fwd-status rather than a push
	statusServed      atomic.Uint64 // fwd-status calls this node answered
	observeGaps       atomic.Uint64 // light member: pushed election changes that did not follow the last one
	snapshotsRestored atomic.Uint64 // lock-table restores from a leader's snapshot
	once              sync.Once

	ml *membership.Membership // gossip membership (nil with static Members)

	loop loopState // touched only by the loop goroutine
	// fwd is light-member forwarding, member and leader side (fwd.go);
	// owned by the loop like loop.
	fwd *forward.State
}

// loopState is everything the loop goroutine owns.
type loopState struct {
	leader      uint64
	isLeader    bool
	term        uint64
	confState   *raftpb.ConfState
	confIndex   uint64 // changes up to here are in the configuration raft started with
	lastApplied uint64
	jobs        fsmJobs           // the committer's work, as the loop sees it (committer.go)
	events      []lockfsm.Event   // an entry's events, reused while small (maxKeptEvents)
	applied     lockfsm.Command   // the entry being applied, decoded as a view; its slices reused (apply)
	proposed    lockfsm.Command   // a forwarded entry being authorised, likewise (authoriseProposal)
	stopWith    error             // set to stop serving with this error (lockerr.ErrRemoved)
	out         []*raftpb.Message // a Ready's messages to send, reused (Network.Send keeps no slice)

	ops   opRegistry
	holds holdRegistry
	own   ownSession
	runs  sessionRuns   // the leader's runs of sessions ending over several entries (sessionruns.go)
	lease *lease.Engine // deadlines, rule (R) and the node memory behind them (lease.go)
	// demote: closed when this node stops leading (transferLeadership).
	demote  []chan struct{}
	confirm confirmer
	noLead  leaderWatch
	props   proposalBatch
	hints   commitHints
	reads   readIndexState // linearizable inspection reads (readindex.go)
	times   applyTimes     // when indexes were applied, for inspection (applytimes.go)
	stats   loopCounters   // counters for Status and metrics (metricsnode.go)
	peers   peerWatch      // the leader's memory of its peers' activity (metricsnode.go)
	heads   queueHeads     // when this node's waiters reached the head of their queue (metricsnode.go)
	tick    *tick.Ticker   // the raft ticker, a quiet follower's timer, the leader's fine ticker (ticks.go)
	yield   campaign.Yield // standing aside for a peer's campaign (yield.go)
	guard   msgGuard       // judging remote raft messages (guard.go)
	snapIn  snapInbox      // received snapshot files, awaiting raft's verdict (snapshotin.go)
	observe observations   // the elections this node's observers watch (observe.go)

	appendsSent, entriesSent uint64 // Status
}

// Start opens (or creates) the node's data directory, starts the transport
// and the raft loop, and returns at once: the node opens its session in the
// background, and Lock calls made before that simply wait (bounded by their
// context). Start fails with an error wrapping lockerr.ErrInvalidConfig or lockerr.ErrDataDir
// when it cannot start; it never leaves goroutines behind on failure.
func Start(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.Gossip != nil && cfg.ID == 0 && cfg.TLS != nil {
		// The certificate names this member: its id is the member's id.
		_, id, err := tlsMemberID(cfg.TLS)
		if err != nil {
			return nil, fmt.Errorf("%w: TLS: %v", lockerr.ErrInvalidConfig, err)
		}
		cfg.ID = id
	}
	if cfg.Gossip != nil && cfg.ID == 0 {
		id, err := resolveID(cfg.DataDir)
		if err != nil {
			return nil, err
		}
		cfg.ID = id
	}
	// Every goroutine of this node (loop, keepalives, transport, gossip,
	// pushes) inherits a profiler label with its raft id, so a CPU profile
	// of a process that embeds several nodes tells them apart.
	var n *Node
	var err error
	pprof.Do(context.Background(), pprof.Labels(profileLabel, fmt.Sprintf("%016x", cfg.ID)), func(context.Context) {
		n, err = start(cfg)
	})
	return n, err
}

// profileLabel is the pprof label key carried by every goroutine a node
// starts; its value is the node's raft id in hex (16 digits).
const profileLabel = "lockraft_node"

// logKeyNode is the attribute every log record of a node carries: its raft
// id in hex (16 digits), as every member id in the logs. The prefix keeps it apart from the keys of the service's own logger
// (a "node" it adds itself would otherwise appear twice). Other context
// keys are lockraft_component (raft, membership, memberlist).
const logKeyNode = "lockraft_node"

// start is Start once the configuration is complete.
func start(cfg Config) (*Node, error) {
	n := &Node{
		cfg:     cfg,
		k:       knobsOf(&cfg),
		log:     cfg.Logger.With(logKeyNode, views.MemberID(cfg.ID)),
		id:      cfg.ID,
		clock:   cfg.Clock,
		snapDir: filepath.Join(cfg.DataDir, "snap"),
		reqc:    make(chan request, 1024),
		recvc:   make(chan []*raftpb.Message, 1024),
		stopc:   make(chan struct{}),
		donec:   make(chan struct{}),
	}
	if err := checkKnobs(n.k); err != nil {
		return nil, err
	}
	if err := mkdirAllSync(n.snapDir); err != nil {
		return nil, fmt.Errorf("%w: %v", lockerr.ErrDataDir, err)
	}
	if err := cleanSnapDir(n.snapDir); err != nil {
		return nil, fmt.Errorf("%w: %v", lockerr.ErrDataDir, err)
	}
	ident, err := checkIdentity(cfg.DataDir, cfg.ID, cfg.ClusterID)
	if err != nil {
		return nil, err
	}
	n.fleet = newFleet(n, ident.formation)
	n.members = n.fleet.MemberSet()
	n.quota = privilege.Quotas{Sessions: n.cfg.MaxSessionsPerMember, Locks: n.cfg.MaxLocksPerSession,
		Static: cfg.Gossip == nil, Member: n.members.Allows}
	ok := false
	defer func() {
		if !ok {
			n.closeResources()
		}
	}()
	var engine string
	n.storage, engine, err = openLog(cfg.DataDir, cfg.LogEngine, n.log)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", lockerr.ErrDataDir, err)
	}
	n.storage = n.k.Wrap(n.storage)
	n.log.Debug("raft log opened", "engine", engine)
	n.fsm, err = lockfsm.Open(filepath.Join(cfg.DataDir, "locks.db"), fsmOptions(n.k.FSM))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", lockerr.ErrDataDir, err)
	}
	// locks.db and raft.db may have just been created: bbolt does not sync
	// their directory entries.
	if err := syncDir(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("%w: %v", lockerr.ErrDataDir, err)
	}
	n.com = committer{dir: n.snapDir, fsm: n.fsm, storage: n.storage, keep: cfg.CompactKeep, log: n.log, k: n.k,
		stop: n.stopc, jobs: make(chan *fsmJob, 1), done: make(chan error, 1), restored: make(chan *restoreJob)}
	if err := n.com.recover(); err != nil {
		return nil, err
	}
	if cfg.Gossip == nil {
		// The static list is the cluster's identity (fleet/staticlist.go).
		if _, err = n.fleet.InitStaticFormation(n.storage.HasState()); err != nil {
			return nil, err
		}
	}
	if !n.storage.HasState() && cfg.Gossip == nil {
		if len(cfg.Members) == 0 {
			return nil, fmt.Errorf("%w: empty data directory and no Members to bootstrap from", lockerr.ErrInvalidConfig)
		}
		cs := &raftpb.ConfState{}
		for _, m := range cfg.Members {
			cs.Voters = append(cs.Voters, m.ID)
		}
		if err := n.storage.Bootstrap(cs); err != nil {
			return nil, fmt.Errorf("%w: bootstrap: %v", lockerr.ErrDataDir, err)
		}
		n.log.Info("bootstrapped new cluster", "voters", views.MemberIDs(cs.Voters), "cluster", cfg.ClusterID)
	}
	hs, cs, err := n.storage.InitialState()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", lockerr.ErrDataDir, err)
	}
	n.loop.confState = cs
	n.loop.times.knownFrom = hs.GetCommit() + 1 // earlier entries were committed before this process
	n.loop.confIndex = n.storage.ConfIndex()
	n.members.SetConf(cs)
	if n.loop.guard.lastIndex, err = n.storage.LastIndex(); err != nil {
		return nil, fmt.Errorf("%w: %v", lockerr.ErrDataDir, err)
	}
	n.rn, err = raft.NewRawNode(&raft.Config{
		ID:                        cfg.ID,
		ElectionTick:              cfg.ElectionTicks,
		HeartbeatTick:             cfg.HeartbeatTicks,
		Storage:                   n.storage,
		MaxSizePerMsg:             1 << 20,
		MaxInflightMsgs:           256,
		MaxUncommittedEntriesSize: 64 << 20,
		CheckQuorum:               true,
		PreVote:                   true,
		StepDownOnRemoval:         true,
		ReadOnlyOption:            raft.ReadOnlySafe,
		AsyncStorageWrites:        true,
		Logger:                    raftLogger{l: n.log, closing: &n.closing},
	})
	if err != nil {
		return nil, fmt.Errorf("%w: raft: %v", lockerr.ErrDataDir, err)
	}
	var adopt func(string) error
	var detail string
	var onForeign func(uint64, string, bool)
	if cfg.Gossip != nil {
		adopt = n.fleet.AdoptFormation // a fresh member joins the formed cluster that adds it
	} else {
		adopt, detail, onForeign = n.fleet.AdoptStaticFormation, n.fleet.StaticDetail(), n.onForeignStaticPeer
	}
	n.tr, err = n.k.StartNetwork(transport.Config{
		Formation:       n.fleet.Formation(),
		AdoptFormation:  adopt,
		FormationDetail: detail,
		OnForeignPeer:   onForeign,
		ClusterID:       cfg.ClusterID,
		LocalID:         cfg.ID,
		ListenAddr:      cfg.ListenAddr,
		Listener:        cfg.Listener,
		SnapshotDir:     n.snapDir,
		Handler:         (*transportHandler)(n),
		Logger:          n.log,
		TLS:             cfg.TLS,
		MaxSnapshotSize: cfg.MaxSnapshotSize,
		DenyListFile:    cfg.DenyListFile,
		Version:         cfg.version(),
	})
	if errors.Is(err, transport.ErrInvalidConfig) {
		return nil, fmt.Errorf("%w: %v", lockerr.ErrInvalidConfig, err)
	} else if err != nil {
		return nil, err
	}
	n.app = appender{wake: make(chan struct{}, 1), id: cfg.ID, storage: n.storage, net: n.tr, k: n.k,
		stop: n.stopc, loopDone: n.donec, local: make(chan []*raftpb.Message, 64), failed: make(chan error, 1),
		term: hs.GetTerm(), vote: hs.GetVote()}
	if m := cfg.Metrics; m != nil {
		n.app.fsync = m.Fsync
	}
	n.loop.guard.leaders = &privilege.LeaderRule{Conf: func() *raftpb.ConfState { return n.loop.confState }, Role: n.tr.PeerRole}
	n.members.SetRoles(n.tr.PeerRole)
	n.addr = cfg.advertised(n.tr.Addr())
	for _, m := range cfg.Members {
		if m.ID != cfg.ID {
			n.tr.AddPeer(m.ID, m.Addr)
		}
	}
	n.loop.ops.init()
	n.loop.holds.init()
	n.fwd = forward.New(cfg.forwardConfig(n.tr, n.fsm, n.stopc), (*fwdHost)(n))
	n.loop.observe = observations{byName: map[string]*observed{}, fsm: n.fsm, fwd: n.fwd}
	n.loop.own.toClose = map[uint64]time.Time{}
	if n.loop.own.earlier, err = loadEarlierSession(cfg.DataDir); err != nil {
		return nil, err
	}
	n.loop.lease = lease.New(cfg.leaseConfig(n.k, n.log), (*leaseHost)(n), n.clock.Now())
	n.loop.tick = tick.New(cfg.tickConfig(n.k, n.clock), (*tickHost)(n), n.rn)
	n.loop.yield.For = cfg.TickInterval
	n.loop.peers = peerWatch{self: cfg.ID, within: cfg.electionTimeout() + cfg.TickInterval}
	n.loop.noLead = leaderWatch{warnAfter: cfg.leaderlessWarnAfter(), log: n.log}
	n.loop.snapIn = snapInbox{dir: n.snapDir, log: n.log}
	n.loop.props = proposalBatch{rn: n.rn, id: cfg.ID}
	n.loop.hints = commitHints{id: cfg.ID, off: cfg.NoCommitHints, rn: n.rn, storage: n.storage}
	n.loop.reads = readIndexState{rn: n.rn, retryAfter: cfg.RetryInterval}
	n.loop.confirm = confirmer{rn: n.rn, lease: n.loop.lease, retryAfter: cfg.RetryInterval, heartbeat: cfg.heartbeatInterval()}
	n.loop.lastApplied = n.fsm.AppliedIndex()
	n.loop.jobs = fsmJobs{lastCommit: n.clock.Now(), fsm: n.fsm, k: n.k, clock: n.clock, to: n.com.jobs,
		commitEvery: cfg.CommitInterval, snapEvery: cfg.SnapshotEvery}
	if cfg.Gossip != nil {
		if err := n.startGossip(); err != nil {
			return nil, err
		}
	}
	ok = true
	cfg.warnIfInsecure(n.log)
	n.log.Info("node started", "addr", n.addr, "bound", n.tr.Addr(), "applied", n.loop.lastApplied, "tls", cfg.TLS != nil)
	n.bgwg.Add(3)
	go func() {
		defer n.bgwg.Done()
		n.app.run()
	}()
	go func() {
		defer n.bgwg.Done()
		n.com.run(n.donec)
	}()
	n.greetPeers()
	go n.run() // from here on only the loop touches n.loop
	go n.keepaliveLoop()
	return n, nil
}

// Addr is the gRPC address the other members dial to reach this node
// (Config.AdvertiseAddr, or the bound address).
func (n *Node) Addr() string { return n.addr }

// ID is the node's raft id.
func (n *Node) ID() uint64 { return n.id }

// Leader is the leader id this node last saw (0 if none).
func (n *Node) Leader() uint64 { return n.lead.Load() }

// greetPeers opens the raft streams to the other raft members this node
// knows of at start (the static list and its configuration), so that a
// leader that stopped reaching it while it was down, or before it first
// started, redials it at once: a restarted or new member hears its leader
// within a heartbeat instead of after its own first election timeout.
func (n *Node) greetPeers() {
	cs := n.loop.confState
	for _, set := range [][]uint64{cs.GetVoters(), cs.GetLearners(), cs.GetVotersOutgoing(), cs.GetLearnersNext()} {
		for _, id := range set {
			if id != n.id {
				n.tr.Greet(id)
			}
		}
	}
	for _, m := range n.cfg.Members {
		if m.ID != n.id {
			n.tr.Greet(m.ID)
		}
	}
}

// addPeer tells the transport where another node listens.
func (n *Node) addPeer(id uint64, addr string) { n.tr.AddPeer(id, addr) }
