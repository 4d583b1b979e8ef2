package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
)

// Stopping a node: Close (for now, a rolling restart), Leave (for good),
// Crash (no cleanup), and the session close that Close and Leave begin
// with.

// Close stops this node for now: it closes its session through the log
// (releasing every lock it holds and removing its waiters in one entry; a
// session of more than SessionEndRun names in several, of which Close waits
// for the first: the leader's entries release the rest in name order),
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

// closeSessionFor closes this node's session through the log, for Close and
// Leave: one CloseSession entry releases every lock it holds and removes its
// waiters (a session of more than SessionEndRun names: begins to, and the
// leader's next entries release the rest). From the proposal on, it waits
// at most two election timeouts for the commit, and at most one while no
// leader is known; past that (or ctx) the cluster's session expiry releases
// the locks, and the error says so.
func (n *Node) closeSessionFor(ctx context.Context) error {
	start := n.clock.Now()
	et := n.cfg.electionTimeout()
	hctx, hcancel := context.WithTimeoutCause(ctx, 2*et, errNoQuorum)
	done := make(chan error, 1)
	proposed := make(chan struct{})
	err := n.do(hctx, func() {
		n.closeOwnSession(done)
		close(proposed)
	})
	hcancel()
	if err != nil {
		return n.closeFailed(ctx, err, start)
	}
	// The wait for a quorum starts once the close is proposed: before it,
	// the loop fails every handle of the session, which at a million held
	// locks takes seconds and says nothing of the quorum.
	select {
	case <-proposed:
	case <-ctx.Done():
		return n.closeFailed(ctx, context.Cause(ctx), start)
	case <-n.donec:
		return n.err()
	}
	cctx, cancel := context.WithTimeoutCause(ctx, 2*et, errNoQuorum)
	defer cancel()
	leaderless := time.NewTimer(et)
	defer leaderless.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-cctx.Done():
			return n.closeFailed(ctx, context.Cause(cctx), start)
		case <-n.donec:
			return n.err()
		case <-leaderless.C:
			if n.lead.Load() == 0 {
				return n.closeFailed(ctx, errNoQuorum, start)
			}
		}
	}
}

// errNoQuorum: the session close was not committed in time.
var errNoQuorum = errors.New("no quorum answered")

// closeFailed explains a session that Close could not close.
func (n *Node) closeFailed(ctx context.Context, cause error, start time.Time) error {
	if err := n.err(); err != nil && !errors.Is(err, lockerr.ErrClosed) {
		return err // it stopped serving (a storage failure, removed)
	}
	waited := n.clock.Now().Sub(start).Round(time.Millisecond)
	if errors.Is(cause, errNoQuorum) || ctx.Err() == nil {
		n.log.Info("could not close the session: no quorum reachable; its locks will be released by session expiry",
			"waited", waited, "ttl", n.cfg.SessionTTL)
		return fmt.Errorf("%w: could not close the session (no quorum reachable in %v): its locks are released when the cluster expires it, %v after this node's last acknowledged keepalive",
			lockerr.ErrUnavailable, waited, n.cfg.SessionTTL)
	}
	return fmt.Errorf("lockraft: close interrupted before the session was closed (%w): its locks are released when the cluster expires it, %v after this node's last acknowledged keepalive",
		cause, n.cfg.SessionTTL)
}
