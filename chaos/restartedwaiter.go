package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node"
)

// FaultRestartedWaiter kills the leader right after its own process queued
// a waiter, and restarts it during the leaderless time that follows (or up
// to half a TTL later, while the survivors redial it with backoff); then
// the name's holder releases. The dead incarnation's session (and its
// waiter, now first in line) must be ended by the restart: the restarted
// member closes its earlier sessions within about a commit of learning a
// leader (node/restart.go, L3), so the name reaches the next live waiter
// long before the dead session could expire. The probe repeats until the
// run ends; the workload runs meanwhile and gets the usual checks.
const FaultRestartedWaiter = "restarted-waiter"

// waiterProbe is one restarted-waiter probe.
type waiterProbe struct {
	round     int
	leader    uint64        // the killed leader, whose process queued the dead waiter
	restarted time.Duration // kill → restart
	took      time.Duration // kill → the live waiter's grant
	by        lockfsm.Kind  // the command whose apply granted the live waiter
	pending   bool          // not granted before the run ended
}

// runRestartedWaiter runs probes until ctx ends.
func runRestartedWaiter(ctx context.Context, c *Cluster, rng *rand.Rand, logf func(string, ...any),
	applied map[string]int) []*waiterProbe {
	var out []*waiterProbe
	for round := 1; ctx.Err() == nil; round++ {
		p, err := restartedWaiterProbe(ctx, c, rng, round, logf)
		if err != nil || p == nil {
			sleepCtx(ctx, 50*time.Millisecond)
			continue
		}
		applied[FaultRestartedWaiter]++
		out = append(out, p)
		sleepCtx(ctx, 100*time.Millisecond+time.Duration(rng.Int64N(int64(200*time.Millisecond))))
	}
	return out
}

// queued reports whether owner waits for name in n's lock table.
func queued(ctx context.Context, n *node.Node, name, owner string) bool {
	locks, err := n.Locks(ctx)
	if err != nil {
		return false
	}
	for _, l := range locks {
		if l.Name == name {
			return slices.ContainsFunc(l.Waiters, func(w lockfsm.WaiterInfo) bool { return w.Owner == owner })
		}
	}
	return false
}

// waitQueued waits (bounded by ctx) until owner waits for name on n.
func waitQueued(ctx context.Context, n *node.Node, name, owner string) bool {
	for ctx.Err() == nil {
		if queued(ctx, n, name, owner) {
			return true
		}
		sleepCtx(ctx, 2*time.Millisecond)
	}
	return false
}

// restartedWaiterProbe runs one probe: a holder on one follower, the
// leader's own waiter behind it, the leader killed and restarted within an
// election timeout, a live waiter on the other follower, the holder's
// release; it times the live waiter's grant from the kill.
func restartedWaiterProbe(ctx context.Context, c *Cluster, rng *rand.Rand, round int,
	logf func(string, ...any)) (*waiterProbe, error) {
	lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
	lead, err := c.WaitLeader(lctx)
	lcancel()
	if err != nil {
		return nil, err
	}
	hid, wid, ok := twoBesides(rng, c.IDs(), lead, c.running)
	if !ok {
		return nil, nil
	}
	h, w := c.Node(hid), c.Node(wid)
	ln := c.Node(lead)
	if h == nil || w == nil || ln == nil {
		return nil, nil
	}
	ttl := c.SessionTTL()
	name := fmt.Sprintf("waiter-probe/%d", round)
	own := func(s string) string { return fmt.Sprintf("%s%s%d", probeOwnerPrefix, s, round) }
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	held, err := h.Acquire(pctx, name, own("wh"), true, 0)
	if err != nil {
		return nil, nil
	}
	// The leader's own process queues a waiter; it dies with the process.
	go func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 2*ttl)
		defer dcancel()
		_, _ = ln.Acquire(dctx, name, own("wd"), true, 0)
	}()
	if !waitQueued(pctx, h, name, own("wd")) {
		_ = held.Release(context.Background())
		return nil, nil
	}
	logf("restarted-waiter probe %d: kill leader n%d with its waiter queued", round, lead)
	killed := time.Now()
	c.Crash(lead)
	// Within the leaderless time, or a little after it: up to half a TTL,
	// long enough for the survivors' redial backoff towards it to grow.
	sleepCtx(ctx, time.Duration(rng.Int64N(int64(ttl/2))))
	if err := c.Restart(lead); err != nil {
		logf("restart n%d: %v", lead, err)
	}
	restarted := time.Since(killed)
	// A live waiter behind the dead one, then the release.
	granted := make(chan time.Time, 1)
	go func() {
		wctx, wcancel := context.WithTimeout(context.Background(), 3*ttl+10*time.Second)
		defer wcancel()
		hw, err := w.Acquire(wctx, name, own("wl"), true, 0)
		if err != nil {
			granted <- time.Time{}
			return
		}
		granted <- time.Now()
		_ = hw.Release(context.Background())
	}()
	qctx, qcancel := context.WithTimeout(ctx, ttl)
	waitQueued(qctx, w, name, own("wl"))
	qcancel()
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = held.Release(rctx)
	rcancel()
	p := &waiterProbe{round: round, leader: lead, restarted: restarted}
	select {
	case at := <-granted:
		if at.IsZero() {
			p.pending = true
		}
		p.took = at.Sub(killed)
	case <-time.After(3*ttl + 10*time.Second):
		p.pending, p.took = true, time.Since(killed)
	}
	p.by = c.Applied.GrantedBy(own("wl"))
	logf("restarted-waiter probe %d: restarted %v after the kill; the live waiter granted %v after the kill, by %v",
		round, p.restarted.Round(time.Millisecond), p.took.Round(time.Millisecond), p.by)
	return p, nil
}

// waiterVerdicts: the dead session holds nothing past its TTL, whatever the
// restart did; what L3 asks of the restart is that it ends the dead
// incarnation's session at once, so that the name reaches the live waiter
// through the restart's CloseSession (or the holder's release, if the
// session was ended before it), never through the leader's ExpireSession at
// the TTL, and soon after the restart: within atOnce, which allows what
// remains of the leaderless time after the kill (at most 2 election
// timeouts once a majority is up: TestSimulationLeaderChurn) and as much
// again for the restarted member to hear the new leader and commit. The
// kind of command is exact; the time allows for a loaded machine through
// atOnce. The time from the kill is reported against when the dead session
// could have expired: its last keepalive was at most a keepalive interval
// before the kill.
func waiterVerdicts(probes []*waiterProbe, ttl, keepalive, atOnce time.Duration, viol func(string, ...any), note func(string)) {
	if len(probes) == 0 {
		return
	}
	bound := ttl - keepalive
	var tooks, lates []time.Duration
	for _, p := range probes {
		tooks = append(tooks, p.took)
		lates = append(lates, p.took-p.restarted)
		if p.pending || p.by == lockfsm.KindExpireSession {
			viol("L3: restarted-waiter probe %d: n%d restarted %v after its kill, but the name reached the next live waiter only %v after the kill (pending %v, by %v): the dead incarnation's waiter was not ended by the restart (it could expire %v after the kill at the earliest)",
				p.round, p.leader, p.restarted.Round(time.Millisecond), p.took.Round(time.Millisecond), p.pending, p.by, bound)
		} else if late := p.took - p.restarted; late > atOnce {
			viol("L3: restarted-waiter probe %d: n%d restarted %v after its kill, but its dead incarnation's waiter was ended only %v after the restart (at once: within %v)",
				p.round, p.leader, p.restarted.Round(time.Millisecond), late.Round(time.Millisecond), atOnce)
		}
	}
	slices.Sort(tooks)
	slices.Sort(lates)
	note(fmt.Sprintf("restarted-waiter: %d probes; kill → the live waiter's grant: median %v, max %v (the dead session could expire %v after the kill); restart → grant: median %v, max %v (at once: within %v)",
		len(tooks), tooks[len(tooks)/2].Round(time.Millisecond), tooks[len(tooks)-1].Round(time.Millisecond), bound,
		lates[len(lates)/2].Round(time.Millisecond), lates[len(lates)-1].Round(time.Millisecond), atOnce))
}
