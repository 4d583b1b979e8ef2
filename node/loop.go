package node

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/internal/views"
)

// The loop: the one goroutine that owns raft, the lock table and loopState.
// Everything else hands it work (do, tryDo) or messages (the transport's
// recvc, the appender's local channel), and it stops serving, for good, on
// a storage failure or a panic.

// err returns why the node stopped serving, or nil.
func (n *Node) err() error {
	if p := n.dead.Load(); p != nil {
		return *p
	}
	return nil
}

// request is one piece of work for the loop: a function to run, or a
// caller's op to submit (the lock path's calls send the op itself rather
// than a closure over it: one allocation less per call). Both travel on
// reqc, so a caller's work runs in the order it was sent.
type request struct {
	f    func()
	op   *op   // submit it, stamped with the time the loop took it
	drop *Hold // with op: this hold is being released (the registry forgets it)
}

// run runs r inside the loop.
func (r request) run(n *Node) {
	if r.f != nil {
		r.f()
		return
	}
	r.op.hold.sentAt = n.clock.Now()
	n.submit(r.op)
	if r.drop != nil {
		n.loop.holds.drop(r.drop)
	}
}

// do runs f inside the loop goroutine. It fails only if the node stopped.
func (n *Node) do(ctx context.Context, f func()) error {
	return n.send(ctx, request{f: f})
}

// submitOp submits o inside the loop (and, for a Release, forgets drop).
// It fails only if the node stopped or ctx ended first.
func (n *Node) submitOp(ctx context.Context, o *op, drop *Hold) error {
	return n.send(ctx, request{op: o, drop: drop})
}

// send hands r to the loop.
func (n *Node) send(ctx context.Context, r request) error {
	if err := n.err(); err != nil {
		return err
	}
	select {
	case n.reqc <- r:
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

// awaitReply waits for what a function the loop was given sends on reply:
// scheduled is the error of handing it to the loop (do), which ends the
// wait at once. If ctx ends first it returns ctx's cause; if the node stops
// first, stopped's error (nil: the error the node stopped with, or
// ErrClosed). A function queued just as the loop ended never runs, so the
// wait never outlives the loop, whatever ctx is.
func awaitReply[T any](ctx context.Context, n *Node, reply <-chan T, scheduled error, stopped func() error) (T, error) {
	var zero T
	if scheduled != nil {
		return zero, scheduled
	}
	if stopped == nil {
		stopped = n.stoppedErr
	}
	select {
	case r := <-reply:
		return r, nil
	case <-ctx.Done():
		return zero, context.Cause(ctx)
	case <-n.donec:
		select {
		case r := <-reply: // it ran before the loop ended
			return r, nil
		default:
			return zero, stopped()
		}
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
		case r := <-n.reqc:
			n.loop.tick.CatchUp(n.clock.Now()) // a quiet follower's ticks, before anything reaches raft
			r.run(n)
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
			n.loop.jobs.done()
			n.loop.jobs.startPending()
		case j := <-n.com.restored:
			n.finishRestore(j) // a snapshot from the leader, verified: swap the table in (the committer still writes it)
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
		n.watchLeader()
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
		case r := <-n.reqc:
			r.run(n)
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
			// entries the version gate refuses (fleet.AdmitProposals). A
			// close gets its run limit here if its member could not tell
			// whether every member ends sessions in runs (sessionruns.go).
			ents := n.fleet.AdmitProposals(m.GetEntries())
			for _, e := range ents {
				if e.GetType() == raftpb.EntryNormal {
					e.Data = n.withRunLimitData(e.GetData())
				}
			}
			n.loop.props.addForwarded(ents)
			continue
		}
		if err := n.rn.Step(m); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) {
			n.log.Debug("step", "err", err, "type", m.GetType().String(), "from", views.MemberID(m.GetFrom()))
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
