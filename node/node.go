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
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/internal/knobs"
	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/node/internal/fleet"
	"github.com/lockraft/lockraft/node/internal/forward"
	"github.com/lockraft/lockraft/node/internal/lease"
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

	reqc  chan func()            // work to run inside the loop
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
	jobs        fsmJobs // the committer's work, as the loop sees it (committer.go)
	events      []lockfsm.Event
	stopWith    error // set to stop serving with this error (lockerr.ErrRemoved)

	ops   opRegistry
	holds holdRegistry
	own   ownSession
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
	pprof.Do(context.Background(), pprof.Labels(ProfileLabel, fmt.Sprintf("%016x", cfg.ID)), func(context.Context) {
		n, err = start(cfg)
	})
	return n, err
}

// ProfileLabel is the pprof label key carried by every goroutine a node
// starts; its value is the node's raft id in hex (16 digits).
const ProfileLabel = "lockraft_node"

// LogKeyNode is the attribute every log record of a node carries: its raft
// id. The prefix keeps it apart from the keys of the service's own logger
// (a "node" it adds itself would otherwise appear twice). Other context
// keys are lockraft_component (raft, membership, memberlist).
const LogKeyNode = "lockraft_node"

// start is Start once the configuration is complete.
func start(cfg Config) (*Node, error) {
	n := &Node{
		cfg:     cfg,
		k:       knobsOf(&cfg),
		log:     cfg.Logger.With(LogKeyNode, cfg.ID),
		id:      cfg.ID,
		clock:   cfg.Clock,
		snapDir: filepath.Join(cfg.DataDir, "snap"),
		reqc:    make(chan func(), 1024),
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
		stop: n.stopc, jobs: make(chan *fsmJob, 1), done: make(chan error, 1)}
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
		n.log.Info("bootstrapped new cluster", "voters", cs.Voters, "cluster", cfg.ClusterID)
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

// AddPeer tells the transport where another node listens.
func (n *Node) AddPeer(id uint64, addr string) { n.tr.AddPeer(id, addr) }

// err returns why the node stopped serving, or nil.
func (n *Node) err() error {
	if p := n.dead.Load(); p != nil {
		return *p
	}
	return nil
}

// do runs f inside the loop goroutine. It fails only if the node stopped.
func (n *Node) do(ctx context.Context, f func()) error {
	if err := n.err(); err != nil {
		return err
	}
	select {
	case n.reqc <- f:
		return nil
	case <-n.donec:
		if err := n.err(); err != nil {
			return err
		}
		return lockerr.ErrClosed
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// run is the loop: the only goroutine that touches rn, fsm and loopState.
func (n *Node) run() {
	defer close(n.donec)
	defer n.recoverLoop()
	if f := n.k.OnLoopStart; f != nil {
		f()
	}
	// The raft ticker, a quiet follower's timer and the leader's fine
	// ticker, which checks the expiry deadlines ten times per tick while
	// one is near, so a crashed holder's lock moves on within ~10 ms of its
	// TTL rather than up to a whole tick later (ticks.go).
	n.loop.tick.Sync(n.clock.Now())
	defer n.loop.tick.Stop()
	for {
		select {
		case <-n.loop.tick.C():
			n.loop.stats.tickWakes++
			// A quiet follower's one timer (its leader has been silent for
			// quietFor) catches raft's ticks up; a tick says whether it
			// made raft send its heartbeats (confirm.go).
			if beat, ok := n.loop.tick.Fired(n.clock.Now()); ok {
				n.loop.confirm.beat = beat
			}
			if err := n.onTick(); err != nil {
				// A failed lock-table commit: stop like a failed log write,
				// so the keepalives stop and the session's locks move on.
				n.fail(err)
				return
			}
			n.leaderCoarseTick(n.clock.Now())
		case <-n.loop.tick.FineC(): // nil (never ready) while the fine ticker is off
			n.onFineTick()
		case f := <-n.reqc:
			n.loop.tick.CatchUp(n.clock.Now()) // a quiet follower's ticks, before anything reaches raft
			f()
		case msgs := <-n.recvc:
			n.loop.tick.CatchUp(n.clock.Now())
			n.stepRemote(msgs)
		case msgs := <-n.app.local:
			n.loop.tick.CatchUp(n.clock.Now())
			n.step(msgs)
		case err := <-n.app.failed:
			n.fail(err)
			return
		case err := <-n.com.done:
			if err != nil {
				n.loop.jobs.busy = false
				n.fail(err) // a failed lock-table commit or restore: stop like a failed log write
				return
			}
			if r := n.loop.jobs.done(); r != nil {
				n.finishRestore(r) // a restore from the leader's snapshot: swap the table in
			}
			n.loop.jobs.startPending()
		case <-n.stopc:
			return
		}
		n.k.PauseTurn(n.stopc) // a paused process, or a loop stalled on its own
		// Let the goroutines the last turn woke (callers whose results it
		// applied, stream handlers) run first and queue their work, so it
		// shares this turn: one MsgProp, one Ready, one MsgApp per peer.
		// Under load this is what makes batches; idle, it costs a
		// scheduler pass.
		runtime.Gosched()
		n.drainInputs()
		if n.loop.stopWith != nil {
			n.stopServing(n.loop.stopWith)
			return
		}
		if err := n.readyLoop(); err != nil {
			n.fail(err)
			return
		}
		if n.endOfTurn() {
			if err := n.readyLoop(); err != nil {
				n.fail(err)
				return
			}
		}
		n.loop.tick.SyncFine()
		n.loop.tick.Sync(n.clock.Now())
	}
}

// recoverLoop is the loop's last line of defence (deferred by run): a panic
// (raft's on input that passed validation, or a bug) stops the node with
// lockerr.ErrInternal — every caller is failed, every handle lost, the keepalives
// stop so the session expires — instead of killing the embedding process or
// running on with raft's state half updated.
func (n *Node) recoverLoop() {
	r := recover()
	if r == nil {
		return
	}
	err := fmt.Errorf("%w: %v", lockerr.ErrInternal, r)
	n.log.Error("raft loop panicked; node stopped", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	n.stopServing(err)
}

// readyLoop flushes the turn's proposals and handles Readys until raft has
// none (loop).
func (n *Node) readyLoop() error {
	n.loop.props.flush()
	for n.rn.HasReady() {
		if err := n.handleReady(); err != nil {
			return err
		}
		n.loop.props.flush() // proposed while applying (a leader change re-proposes)
	}
	return nil
}

// drainInputs takes whatever else is already queued, so that concurrent
// proposals share one Ready: one fsync and one message per peer.
func (n *Node) drainInputs() {
	for i := 0; i < 4096; i++ {
		select {
		case f := <-n.reqc:
			f()
		case msgs := <-n.recvc:
			n.stepRemote(msgs)
		case msgs := <-n.app.local:
			n.step(msgs)
		default:
			return
		}
	}
}

// step steps messages into raft: this node's own (the appender's
// responses, the responses of applied entries) and remote ones that
// stepRemote admitted.
func (n *Node) step(msgs []*raftpb.Message) {
	for _, m := range msgs {
		if s := n.k.Stages; s != nil && n.loop.isLeader {
			s.Ack(m)
		}
		if isCommitHint(m) {
			n.loop.hints.onHint(m, n.loop.guard.lastIndex)
			continue
		}
		switch m.GetType() {
		case raftpb.MessageType_MsgHeartbeat, raftpb.MessageType_MsgApp, raftpb.MessageType_MsgSnap:
			now := n.clock.Now()
			n.loop.lease.SeeLeader(m, now)
			n.leaderSeen.Advance(now)
			n.loop.tick.NoteHeard(m.GetFrom(), now)
		case raftpb.MessageType_MsgHeartbeatResp:
			n.loop.lease.TakeReport(m, n.clock.Now())
		}
		if m.GetType() == raftpb.MessageType_MsgProp {
			// A follower's forwarded proposals (lock commands of its own
			// sessions: admit checked them) join this turn's batch, but for
			// entries the version gate refuses (fleet.AdmitProposals).
			n.loop.props.addForwarded(n.fleet.AdmitProposals(m.GetEntries()))
			continue
		}
		if err := n.rn.Step(m); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) {
			n.log.Debug("step", "err", err, "type", m.GetType().String(), "from", m.GetFrom())
		}
		if m.GetType() == raftpb.MessageType_MsgStorageAppendResp {
			n.onDurable(m)
		}
	}
}

// onDurable is called (loop) for each MsgStorageAppendResp from the appender,
// after raft stepped it. It records how far this node's log is durable and,
// on a leader, queues a hint for each follower that may use it.
func (n *Node) onDurable(m *raftpb.Message) {
	h := &n.loop.hints
	term, idx, ok := h.durable(m)
	if !ok || h.off {
		return
	}
	if n.loop.isLeader {
		// Only while the configuration allows it: see the safety argument.
		if term == n.loop.term && n.loop.lease.Active() && h.confIndex <= n.loop.lastApplied &&
			commitHintQuorum(n.loop.confState) {
			h.queue(term, idx, n.loop.confState.GetVoters())
		}
		return
	}
	h.commit(n.loop.guard.lastIndex) // the leader's hint may have come first
}

// fail stops serving after a storage error: the node must not acknowledge
// anything it could not make durable (S3).
func (n *Node) fail(err error) {
	if errors.Is(err, lockerr.ErrNewerVersion) || errors.Is(err, lockerr.ErrInternal) {
		n.stopServing(err)
		return
	}
	n.stopServing(fmt.Errorf("%w: %v", lockerr.ErrStorage, err))
}

// stopServing fails every pending call and ends every handle with err; the
// loop returns right after, and every later call fails with err.
func (n *Node) stopServing(err error) {
	n.dead.CompareAndSwap(nil, &err)
	if n.closing.Load() && errors.Is(err, lockerr.ErrRemoved) {
		n.log.Info("node stopped serving: left the cluster (Leave)")
	} else {
		n.log.Error("node stopped serving", "err", err)
	}
	n.loop.ops.failAll(err)
	n.loop.holds.loseAll(err)
	n.loop.observe.endAll(err)
}

// Close stops this node for now: it closes its session through the log
// (releasing every lock it holds and removing its waiters in one entry),
// hands leadership to another voter if it leads, and stops. The member keeps
// its place in the cluster and its data directory: started again on it, it
// comes back as itself (a rolling restart). Use Leave for a member that goes
// away for good.
//
// ctx bounds the whole call. The session close waits at most two election
// timeouts for a commit (one if no leader is known); if it cannot be closed
// (no quorum, or ctx ended), Close still stops and returns an error that
// wraps lockerr.ErrUnavailable (or ctx's cause) and says the locks will be released
// by session expiry. Idempotent: every call after the first (Close or Leave)
// returns nil at once.
func (n *Node) Close(ctx context.Context) error {
	var err error
	n.once.Do(func() {
		err = n.gracefulStop(ctx, false)
		n.stop()
	})
	return err
}

// Leave removes this member from the cluster for good, then stops: as Close,
// and between handing over leadership and stopping it asks the leader to
// remove it from the raft configuration and waits until that is applied
// (static or gossip mode), and with gossip it announces that it left. Its
// data directory must not be started again (with gossip it would be told
// lockerr.ErrRemoved). The voters left behind form the new configuration: leaving
// voters one by one shrinks it. An error (lockerr.ErrUnavailable, or ctx's cause)
// says which step did not complete; the node stops either way.
func (n *Node) Leave(ctx context.Context) error {
	var err error
	n.once.Do(func() {
		err = n.gracefulStop(ctx, true)
		n.stop()
	})
	return err
}

// Crash stops the node without any cleanup: no session close, no leadership
// transfer, no final lock-table commit. It is what a kill -9 looks like to the
// rest of the cluster, for tests and the fault checker.
func (n *Node) Crash() {
	n.once.Do(n.stop)
}

func (n *Node) stop() {
	closed := lockerr.ErrClosed
	n.dead.CompareAndSwap(nil, &closed)
	close(n.stopc)
	<-n.donec
	n.loop.ops.failAll(lockerr.ErrClosed)
	n.loop.holds.loseAll(lockerr.ErrClosed)
	n.loop.observe.endAll(lockerr.ErrClosed)
	if n.ml != nil {
		_ = n.ml.Shutdown()
	}
	n.bgwg.Wait()
	n.closeResources()
}

func (n *Node) closeResources() {
	if n.tr != nil {
		n.tr.Close()
	}
	if n.fsm != nil {
		n.fsm.Close()
	}
	if n.storage != nil {
		n.storage.Close()
	}
}

// gracefulStop closes the session, hands over leadership and, for leave,
// leaves the raft configuration and gossip. Every step is bounded by ctx and
// by a few election timeouts, so that it returns even without a deadline
// when the cluster has lost its quorum.
func (n *Node) gracefulStop(ctx context.Context, leave bool) error {
	if n.err() != nil {
		return nil
	}
	if n.ml != nil && leave {
		defer n.fleet.LeaveGossip()
	}
	if err := n.closeSessionFor(ctx); err != nil {
		return err
	}
	// Hand leadership over so the cluster does not wait an election timeout.
	tctx, tcancel := context.WithTimeout(ctx, 2*n.cfg.electionTimeout())
	defer tcancel()
	transferred := make(chan struct{})
	if n.do(tctx, func() { n.transferLeadership(transferred) }) == nil {
		select {
		case <-transferred:
		case <-tctx.Done():
		case <-n.donec:
		}
	}
	if leave && !n.fleet.LeaveCluster(ctx, n.ConfState) {
		if err := context.Cause(ctx); err != nil {
			return fmt.Errorf("lockraft: leave: removal from the raft configuration not confirmed before the context ended: %w", err)
		}
		return fmt.Errorf("%w: leave: removal from the raft configuration not confirmed", lockerr.ErrUnavailable)
	}
	return nil
}
