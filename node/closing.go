package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
)

// closeSessionFor closes this node's session through the log, for Close and
// Leave: one CloseSession entry releases every lock it holds and removes its
// waiters. It waits at most two election timeouts for the commit, and at
// most one while no leader is known; past that (or ctx) the cluster's
// session expiry releases the locks, and the error says so.
func (n *Node) closeSessionFor(ctx context.Context) error {
	start := n.clock.Now()
	et := n.cfg.electionTimeout()
	cctx, cancel := context.WithTimeoutCause(ctx, 2*et, errNoQuorum)
	defer cancel()
	done := make(chan error, 1)
	if err := n.do(cctx, func() { n.closeOwnSession(done) }); err != nil {
		return n.closeFailed(ctx, err, start)
	}
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
