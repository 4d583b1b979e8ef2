package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/lockraft/lockraft/node"
)

// FaultLeaderChurn kills or partitions whoever leads every 0.5–2 election
// timeouts after it is seen leading.
//
// On 5 nodes or more: at most one such victim down at a time (the previous
// one is restarted or healed when the next is hit), so that a majority stays
// up with one crashed holder besides. Alongside, crashed-holder probes: a
// lock is taken on one node, another node waits for it, the holder's node is
// killed, and the wait must be granted TTL after the holder's last keepalive
// plus only the time the cluster had no leader after that deadline (L3:
// failovers carry a session's silence over), and never before the holder's
// own deadline (S5).
//
// On 3 nodes: leader kills only, each victim restarted from its data
// directory 1–3 election timeouts after its kill, and the next leader hit
// only once every member runs again (often right after the restart, while
// the restarted member catches up). No probes: a crashed holder besides a
// hit leader would leave no majority.
//
// On both, the applied log measures each kill (failover.go): the leaderless
// time, the time to the next grant anywhere, and per name how long a hold
// of a killed member's session stood in the way, which must stay within
// TTL + the leaderless time after death + TTL (L3). The usual workload runs
// meanwhile and gets the usual checks.
const FaultLeaderChurn = "leader-churn"

// probeOwnerPrefix marks the probes' owners (not the workload clients').
const probeOwnerPrefix = "probe-"

// gap is a stretch of time in which the churn left the cluster without a
// leader: from a hit until another leader was seen.
type gap struct {
	start, end time.Time
	victim     uint64
	isolated   bool // the victim was cut off, not killed
}

// leaderless is how much of [from, to] fell in gaps.
func leaderless(gaps []gap, from, to time.Time) time.Duration {
	var d time.Duration
	for _, g := range gaps {
		s, e := g.start, g.end
		if s.Before(from) {
			s = from
		}
		if e.IsZero() || e.After(to) {
			e = to
		}
		if e.After(s) {
			d += e.Sub(s)
		}
	}
	return d
}

// churnState is what a leader churner, of nodes in this process
// (leaderChurner) or of node processes (procChurner), keeps under its
// mutex: the leaderless gaps it caused, the roles a probe gives two nodes,
// its last hit, and the kills it made (only leaderChurner notes these and
// waits for its victims to run again).
type churnState struct {
	mu      sync.Mutex
	gaps    []gap
	spare   uint64        // a probe's waiter: isolated rather than killed (0: none)
	protect uint64        // a probe's holder before its planned crash: never hit (0: none)
	victim  uint64        // the leader of the last hit while it is isolated
	undo    func()        // undoes the last hit
	deaths  []death       // leader kills and probe holders' kills (failover.go)
	back    chan struct{} // restartAfter: closed once the last victim runs again
}

func (cs *churnState) setRoles(spare, protect uint64) {
	cs.mu.Lock()
	cs.spare, cs.protect = spare, protect
	cs.mu.Unlock()
}

func (cs *churnState) gapsCopy() []gap {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return append([]gap(nil), cs.gaps...)
}

func (cs *churnState) deathsCopy() []death {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return append([]death(nil), cs.deaths...)
}

// died notes that id was killed just now.
func (cs *churnState) died(id uint64) {
	cs.mu.Lock()
	cs.deaths = append(cs.deaths, death{id: id, at: time.Now()})
	cs.mu.Unlock()
}

// ranAgain notes that id runs again since at (every node, id 0).
func (cs *churnState) ranAgain(id uint64, at time.Time) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for i := range cs.deaths {
		if d := &cs.deaths[i]; (id == 0 || d.id == id) && d.back.IsZero() {
			d.back = at
		}
	}
}

// waitBack waits (bounded by ctx) until the last victim runs again
// (restartAfter).
func (cs *churnState) waitBack(ctx context.Context) {
	cs.mu.Lock()
	back := cs.back
	cs.mu.Unlock()
	if back == nil {
		return
	}
	select {
	case <-back:
	case <-ctx.Done():
	}
}

// restore undoes the last hit, if it is not undone yet.
func (cs *churnState) restore() {
	cs.mu.Lock()
	undo := cs.undo
	cs.undo, cs.victim = nil, 0
	cs.mu.Unlock()
	if undo != nil {
		undo()
	}
}

// lastVictim is the isolated leader of the last hit (0: none).
func (cs *churnState) lastVictim() uint64 {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.victim
}

// leaderSeen ends the open gap, if any, and returns it: a leader other
// than the victim leads.
func (cs *churnState) leaderSeen() (g gap, ended bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if k := len(cs.gaps); k > 0 && cs.gaps[k-1].end.IsZero() {
		cs.gaps[k-1].end = time.Now()
		return cs.gaps[k-1], true
	}
	return gap{}, false
}

// roleOf says whether id is protected from hits or spared from kills.
func (cs *churnState) roleOf(id uint64) (protected, spare bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.protect == id, cs.spare == id
}

// leaderChurner hits the leader; spare nodes are isolated rather than
// killed, and protected ones are never hit (a probe's holder before its
// planned crash).
type leaderChurner struct {
	c    *Cluster
	rng  *rand.Rand
	logf func(string, ...any)
	et   time.Duration
	hits int
	// restartAfter: a killed leader restarts 1–3 election timeouts after
	// its kill, and the next hit waits until it runs (3 members).
	restartAfter bool
	churnState
}

// crash kills id and notes its death.
func (lc *leaderChurner) crash(id uint64) {
	lc.c.Crash(id)
	lc.died(id)
}

// restart restarts id if it is down and notes when it runs again.
func (lc *leaderChurner) restart(id uint64) error {
	err := lc.c.Restart(id)
	lc.ranAgain(id, time.Now())
	return err
}

// run hits leaders until ctx ends, then undoes the last hit.
func (lc *leaderChurner) run(ctx context.Context) {
	defer lc.restore()
	for ctx.Err() == nil {
		var lead uint64
		for lead == 0 && ctx.Err() == nil {
			sleepCtx(ctx, 2*time.Millisecond)
			victim := lc.lastVictim()
			for _, id := range lc.c.IDs() {
				if n := lc.c.Node(id); n != nil && n.Leader() == id && id != victim {
					lead = id
				}
			}
		}
		if lead == 0 {
			return // the run ended first: the stretch stays open
		}
		if g, ended := lc.leaderSeen(); ended {
			lc.logf("leader churn %d: n%d leads %v after the hit on n%d", lc.hits, lead, g.end.Sub(g.start).Round(time.Millisecond), g.victim)
		}
		if ctx.Err() != nil {
			return
		}
		sleepCtx(ctx, lc.et/2+time.Duration(lc.rng.Int64N(int64(3*lc.et/2))))
		if lc.restartAfter {
			lc.waitBack(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		if n := lc.c.Node(lead); n == nil || n.Leader() != lead {
			continue // lost leadership meanwhile
		}
		protected, spare := lc.roleOf(lead)
		if protected {
			continue
		}
		lc.restore()
		lc.hits++
		id := lead
		lc.mu.Lock()
		lc.gaps = append(lc.gaps, gap{start: time.Now(), victim: id, isolated: spare})
		lc.mu.Unlock()
		switch {
		case spare:
			lc.logf("leader churn %d: isolate leader n%d", lc.hits, id)
			lc.c.Isolate(id)
			lc.mu.Lock()
			lc.victim, lc.undo = id, lc.c.Heal
			lc.mu.Unlock()
		case lc.restartAfter:
			delay := lc.et + time.Duration(lc.rng.Int64N(int64(2*lc.et)))
			lc.logf("leader churn %d: kill leader n%d, restart in %v", lc.hits, id, delay.Round(time.Millisecond))
			lc.crash(id)
			back := make(chan struct{})
			var once sync.Once
			restart := func() {
				once.Do(func() {
					if err := lc.restart(id); err != nil {
						lc.logf("restart n%d: %v", id, err)
					}
					close(back)
				})
			}
			lc.mu.Lock()
			lc.undo, lc.back = restart, back
			lc.mu.Unlock()
			go func() {
				sleepCtx(ctx, delay)
				restart()
			}()
		default:
			lc.logf("leader churn %d: kill leader n%d", lc.hits, id)
			lc.crash(id)
			lc.mu.Lock()
			lc.undo = func() {
				if err := lc.restart(id); err != nil {
					lc.logf("restart n%d: %v", id, err)
				}
			}
			lc.mu.Unlock()
		}
	}
}

// probeResult is one crashed-holder probe.
type probeResult struct {
	holder, waiter uint64
	took           time.Duration // the holder's last keepalive → the grant applied
	leaderless     time.Duration // of that, after the holder's deadline, without a leader
	early          time.Duration // > 0: granted this long before the holder's own deadline (S5)
	pending        bool          // not granted when the run ended: took is a lower bound
}

// twoBesides picks two nodes of ids at random, neither of them lead and both
// up (ok false: there are not two).
func twoBesides(rng *rand.Rand, ids []uint64, lead uint64, up func(id uint64) bool) (a, b uint64, ok bool) {
	var cands []uint64
	for _, id := range ids {
		if id != lead && up(id) {
			cands = append(cands, id)
		}
	}
	if len(cands) < 2 {
		return 0, 0, false
	}
	rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	return cands[0], cands[1], true
}

// probe runs one crashed-holder probe: hold on one node, wait on another,
// kill the holder's node, time the grant; then restart the holder.
func probe(ctx context.Context, c *Cluster, lc *leaderChurner, rng *rand.Rand, round int, ttl time.Duration) (*probeResult, error) {
	lead, err := c.WaitLeader(ctx)
	if err != nil {
		return nil, err
	}
	h, w, ok := twoBesides(rng, c.IDs(), lead, c.running)
	if !ok {
		return nil, nil // not now: the churn has a victim down and another is restarting
	}
	holder, waiter := c.Node(h), c.Node(w)
	if holder == nil || waiter == nil {
		return nil, nil
	}
	lc.setRoles(w, h)
	defer lc.setRoles(0, 0)
	name := fmt.Sprintf("probe/%d", round)
	hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = holder.Acquire(hctx, name, probeOwnerPrefix+fmt.Sprintf("h%d", round), true, 0)
	hcancel()
	if err != nil {
		return nil, nil // the churn got in the way; try again
	}
	owner := probeOwnerPrefix + fmt.Sprintf("w%d", round)
	granted := make(chan *node.Hold, 1)
	go func() {
		// Not the run's context: a probe still waiting when the run ends
		// gets a grace (below) before it is judged.
		wctx, wcancel := context.WithTimeout(context.Background(), 4*ttl+30*time.Second)
		defer wcancel()
		hw, err := waiter.Acquire(wctx, name, owner, true, 0)
		if err != nil {
			hw = nil
		}
		granted <- hw
	}()
	// Let the churn hit a leader or two first, then kill the holder.
	sleepCtx(ctx, time.Duration(rng.Int64N(int64(2*lc.et))))
	lc.crash(h)
	lc.setRoles(w, 0)
	last, deadline := holder.LastKeepaliveSent(), holder.SessionDeadline()
	var hw *node.Hold
	pending := false
	select {
	case hw = <-granted:
	case <-ctx.Done():
		// The run ended first: wait a little longer (the churn has
		// stopped), then judge by the time so far.
		select {
		case hw = <-granted:
		case <-time.After(probeGrace(last, ttl, lc.et)):
			pending = true
		}
	}
	at := c.Applied.GrantedAt(owner)
	if at.IsZero() && pending {
		at = time.Now()
	} else if at.IsZero() {
		// The waiter lost its session (its node was isolated past its
		// TTL): not a verdict on the crashed holder.
		if err := lc.restart(h); err != nil {
			return nil, err
		}
		return nil, nil
	}
	if hw != nil {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		_ = hw.Release(rctx)
		rcancel()
	}
	r := &probeResult{holder: h, waiter: w, took: at.Sub(last), pending: pending,
		leaderless: leaderless(lc.gapsCopy(), last.Add(ttl), at)}
	if at.Before(deadline) {
		r.early = deadline.Sub(at)
	}
	if err := lc.restart(h); err != nil {
		return nil, err
	}
	return r, nil
}

// runLeaderChurn is Run's schedule for FaultLeaderChurn: the churn and,
// on 5 nodes or more, the probes until ctx ends. It returns the probes'
// results and the churner, whose gaps and deaths the failover measurement
// reads.
func runLeaderChurn(ctx context.Context, c *Cluster, rng *rand.Rand, logf func(string, ...any), applied map[string]int) ([]*probeResult, *leaderChurner) {
	ttl, et := c.SessionTTL(), c.ElectionTimeout()
	lc := &leaderChurner{c: c, rng: rand.New(rand.NewPCG(rng.Uint64(), 0x1c)), logf: logf, et: et,
		restartAfter: len(c.IDs()) < 5}
	done := make(chan struct{})
	go func() { defer close(done); lc.run(ctx) }()
	var results []*probeResult
	if !lc.restartAfter {
		results = probeRounds(ctx, et, ttl, logf, func(round int) (*probeResult, error) {
			return probe(ctx, c, lc, rng, round, ttl)
		})
	}
	<-done
	applied[FaultLeaderChurn] = lc.hits
	if !lc.restartAfter {
		applied["probes"] = len(results)
	}
	return results, lc
}

// probeRounds runs crashed-holder probes (probe, of nodes in this process
// or of node processes), an election timeout apart, until ctx ends, and
// returns what they tell: every grant, and the last probe if it was still
// waiting when the run ended but had had its TTL. A probe that failed is
// logged and tried again at once.
func probeRounds(ctx context.Context, et, ttl time.Duration, logf func(string, ...any),
	probe func(round int) (*probeResult, error)) []*probeResult {
	var results []*probeResult
	for round := 1; ctx.Err() == nil; round++ {
		r, err := probe(round)
		if err != nil {
			logf("probe %d: %v", round, err)
			continue
		}
		if r != nil && r.pending {
			// Only a probe that had its TTL before the run ended tells
			// anything.
			if r.took > ttl {
				results = append(results, r)
			}
			break
		}
		if r != nil {
			logf("probe %d: holder n%d killed, waiter n%d granted %v after its last keepalive (%v without a leader after the deadline)",
				round, r.holder, r.waiter, r.took.Round(time.Millisecond), r.leaderless.Round(time.Millisecond))
			results = append(results, r)
		}
		sleepCtx(ctx, et)
	}
	return results
}

// probeGrace is how long a probe still waiting when the run ends is given:
// until its deadline with some slack, and three election timeouts more.
func probeGrace(last time.Time, ttl, et time.Duration) time.Duration {
	return max(0, time.Until(last.Add(ttl+2*et))) + 3*et
}

// probeVerdicts turns probe results into violations and notes: the grant
// must come TTL + (leaderless time after the deadline) + slack after the
// holder's last keepalive, and not before the holder's own deadline.
func probeVerdicts(results []*probeResult, ttl, slack time.Duration, viol func(string, ...any), note func(string)) {
	var worst, worstLeaderless time.Duration
	for i, r := range results {
		if over := r.took - r.leaderless - ttl; over > worst {
			worst = over
		}
		worstLeaderless = max(worstLeaderless, r.leaderless)
		switch {
		case r.took-r.leaderless > ttl+slack && r.pending:
			viol("L3: probe %d: holder n%d's lock still not granted %v after its last keepalive, %v of it without a leader (TTL %v + slack %v)",
				i+1, r.holder, r.took, r.leaderless, ttl, slack)
		case r.took-r.leaderless > ttl+slack:
			viol("L3: probe %d: holder n%d's lock granted %v after its last keepalive, %v of it without a leader (TTL %v + slack %v)",
				i+1, r.holder, r.took, r.leaderless, ttl, slack)
		}
		if r.early > 0 {
			viol("S5: probe %d: holder n%d's lock granted %v before its own deadline", i+1, r.holder, r.early)
		}
	}
	note(fmt.Sprintf("leader churn: %d crashed-holder probes; grant − last keepalive − leaderless time after the deadline ≤ TTL + %v (worst %v over TTL); longest leaderless stretch after a deadline %v",
		len(results), slack, worst.Round(time.Millisecond), worstLeaderless.Round(time.Millisecond)))
}
