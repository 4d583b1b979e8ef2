package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/internal/views"
)

// Leader changes and a cluster that cannot serve, as callers see them:
//   - the keepalive sender tells a new leader at once (and drops a call to
//     the old one), so a healthy session loses as little as possible to
//     each failover;
//   - TryLock gives up after tryLockBound without an answer (lockerr.ErrUnavailable),
//     and a Lock whose context ends while this node has no leader says so
//     (lockerr.ErrUnavailable and the context's cause);
//   - the node logs at WARN, once, when it has had no leader for
//     leaderlessWarnAfter, and at INFO when it has one again;
//   - Ready waits until the node can serve.

// tryLockBound is how long TryLock waits for its answer: two election
// timeouts, time for one election and a commit.
func (c Config) tryLockBound() time.Duration {
	if c.TryLockTimeout > 0 {
		return c.TryLockTimeout
	}
	return 2 * c.electionTimeout()
}

// leaderlessWarnAfter: no leader for this long is logged at WARN (once).
func (c Config) leaderlessWarnAfter() time.Duration { return 3 * c.electionTimeout() }

// leaderless reports whether this node has no working leader now: none
// known, or none heard from for an election timeout. A light member hears
// no raft messages: it knows its leader by its calls, and forgets it when
// one fails (forward.LeaderLost), so a known leader is a working one.
// Any goroutine.
func (n *Node) leaderless() bool {
	if n.lead.Load() == 0 {
		return true
	}
	if n.light() {
		return false
	}
	seen := n.leaderSeen.Load()
	return seen.IsZero() || n.clock.Now().Sub(seen) > n.cfg.electionTimeout()
}

// errTryLockBound ends a TryLock that got no answer in tryLockBound.
var errTryLockBound = errors.New("no answer within the TryLock bound")

// acquireContext bounds a TryLock by tryLockBound.
func (n *Node) acquireContext(ctx context.Context, wait bool) (context.Context, context.CancelFunc) {
	if wait {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, n.cfg.tryLockBound(), errTryLockBound)
}

// acquireGaveUp is the error of an Acquire whose context ended: lockerr.ErrUnavailable
// for a TryLock past its bound, lockerr.ErrUnavailable wrapping the caller's cause
// when this node has no leader, else the caller's cause.
func (n *Node) acquireGaveUp(ctx context.Context, wait bool) error {
	cause := context.Cause(ctx)
	switch {
	case !wait && errors.Is(cause, errTryLockBound):
		return fmt.Errorf("%w: no leader answered within %v", lockerr.ErrUnavailable, n.cfg.tryLockBound())
	case n.leaderless():
		return fmt.Errorf("%w: no leader: %w", lockerr.ErrUnavailable, cause)
	}
	return cause
}

// leaderWatch is the loop's memory of a leaderless stretch.
type leaderWatch struct {
	since     time.Time // zero: there is a leader
	warned    bool      // the stretch was logged
	starting  bool      // … at INFO: this node had never had a leader
	hadLeader bool      // a leader was known since this node started

	// Set at start.
	warnAfter time.Duration // leaderlessWarnAfter
	log       *slog.Logger
}

// inStretch reports whether the watch is in a leaderless stretch: the loop
// then runs check at the end of each turn too (watchLeader), not only on the
// tick.
func (w *leaderWatch) inStretch() bool { return !w.since.IsZero() }

// check runs every tick, and at the end of a turn during a stretch: WARN
// once after leaderlessWarnAfter without a leader (INFO before this node
// first knew one: it is starting), and INFO when there is one again
// ("again" only after a WARN). leaderless is the node's leaderless(),
// leader the leader it follows, closing whether Close has begun (no
// warning then).
func (w *leaderWatch) check(now time.Time, leaderless bool, leader uint64, closing bool) {
	if !leaderless {
		w.hadLeader = true
		switch {
		case w.warned && w.starting:
			w.log.Info("cluster has a leader", "leader", views.MemberID(leader), "leaderless_for", now.Sub(w.since).Round(time.Millisecond))
		case w.warned:
			w.log.Info("cluster has a leader again", "leader", views.MemberID(leader), "leaderless_for", now.Sub(w.since).Round(time.Millisecond))
		}
		*w = leaderWatch{hadLeader: true, warnAfter: w.warnAfter, log: w.log}
		return
	}
	if w.since.IsZero() {
		w.since = now
	}
	if !w.warned && now.Sub(w.since) >= w.warnAfter && !closing {
		w.warned, w.starting = true, !w.hadLeader
		log := w.log.Warn
		if w.starting {
			// A node that never had a leader is starting: the cluster forming
			// or its other members not started yet is normal, not a fault.
			log = w.log.Info
		}
		log("no leader: locks can be neither taken nor released until a majority of voters is reachable",
			"leaderless_for", now.Sub(w.since).Round(time.Millisecond))
	}
}

// watchLeader ends the leaderless watch's stretch at the end of the turn
// in which this node found a leader again. The tick runs the watch too, but
// a follower that is quiet as soon as its leader is back (ticks.go) does
// not tick, and the INFO would wait for its next tick, which may never come
// while the leader is heard.
func (n *Node) watchLeader() {
	if n.loop.noLead.inStretch() && !n.leaderless() {
		n.loop.noLead.check(n.clock.Now(), false, n.loop.leader, n.closing.Load())
	}
}

// Ready blocks until this node can serve: it knows a leader and its session
// is open. It returns ctx's cause if ctx ends first (wrapping lockerr.ErrUnavailable
// while there is no leader), and the node's error if it stopped.
func (n *Node) Ready(ctx context.Context) error {
	for {
		lead, sess := n.lead.changed(), n.sess.changed()
		if err := n.err(); err != nil {
			return err
		}
		if n.lead.Load() != 0 && n.sess.Load() != 0 {
			return nil
		}
		select {
		case <-lead:
		case <-sess:
		case <-n.donec:
		case <-ctx.Done():
			if n.leaderless() {
				return fmt.Errorf("%w: no leader: %w", lockerr.ErrUnavailable, context.Cause(ctx))
			}
			return context.Cause(ctx)
		}
	}
}
