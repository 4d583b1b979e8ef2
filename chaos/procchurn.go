package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"time"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node"
)

// ProcLeaderChurn is FaultLeaderChurn on node processes: the leader's
// process is killed (kill -9, restarted when the next leader is hit), or,
// where netns works and the leader is a probe's waiter, its namespace is cut
// off; with the same crashed-holder probes (leaderchurn.go), whose holder is
// a process killed with kill -9.
const ProcLeaderChurn = FaultLeaderChurn

// procChurner hits leader processes.
type procChurner struct {
	r          *procRun
	rng        *rand.Rand
	et         time.Duration
	hits       int
	churnState // spare: isolated where netns works, else spared
}

// leader is the id a running process says leads, confirmed by that process.
func (pc *procChurner) leader(ctx context.Context, skip uint64) uint64 {
	for _, id := range pc.r.ids() {
		if id == skip || pc.r.isDead(id) {
			continue
		}
		if l := pc.r.leader(ctx, id); l != 0 && l != skip && !pc.r.isDead(l) && pc.r.leader(ctx, l) == l {
			return l
		}
	}
	return 0
}

func (pc *procChurner) run(ctx context.Context) {
	defer pc.restore()
	for ctx.Err() == nil {
		var lead uint64
		for lead == 0 && ctx.Err() == nil {
			victim := pc.lastVictim()
			if lead = pc.leader(ctx, victim); lead == 0 {
				sleepCtx(ctx, 5*time.Millisecond)
			}
		}
		pc.leaderSeen()
		sleepCtx(ctx, pc.et/2+time.Duration(pc.rng.Int64N(int64(3*pc.et/2))))
		if ctx.Err() != nil || pc.r.leader(ctx, lead) != lead {
			continue
		}
		protected, spare := pc.roleOf(lead)
		if protected || (spare && pc.r.netns == nil) {
			continue
		}
		pc.restore()
		pc.hits++
		id := lead
		pc.mu.Lock()
		pc.gaps = append(pc.gaps, gap{start: time.Now()})
		if spare {
			pc.r.cfg.Logf("leader churn %d: isolate leader n%d (netns)", pc.hits, id)
			pc.r.netns.Isolate(id)
			pc.victim, pc.undo = id, pc.r.netns.HealAll
		} else {
			pc.r.cfg.Logf("leader churn %d: kill -9 leader n%d", pc.hits, id)
			pc.mu.Unlock()
			pc.r.kill(id)
			pc.mu.Lock()
			pc.undo = func() {
				if err := pc.r.start(id, false); err != nil {
					pc.r.cfg.Logf("restart n%d: %v", id, err)
				}
			}
		}
		pc.mu.Unlock()
	}
}

// probe is leaderchurn.go's probe on processes.
func (pc *procChurner) probe(ctx context.Context, rng *rand.Rand, round int, ttl time.Duration) (*probeResult, error) {
	r := pc.r
	lead := pc.leader(ctx, 0)
	if lead == 0 {
		sleepCtx(ctx, pc.et)
		return nil, nil
	}
	h, w, two := twoBesides(rng, r.ids(), lead, func(id uint64) bool { return !r.isDead(id) && r.leader(ctx, id) != 0 })
	if !two {
		return nil, nil
	}
	pc.setRoles(w, h)
	defer pc.setRoles(0, 0)
	name := fmt.Sprintf("probe/%d", round)
	hOwner, wOwner := probeOwnerPrefix+fmt.Sprintf("h%d", round), probeOwnerPrefix+fmt.Sprintf("w%d", round)
	var tok uint64
	hctx, hc := context.WithTimeout(ctx, 6*time.Second)
	err := r.get(hctx, h, "/probe-hold?"+url.Values{"name": {name}, "owner": {hOwner}}.Encode(), &tok)
	hc()
	if err != nil {
		return nil, nil // the churn got in the way; try again
	}
	var ok bool
	if err := r.get(ctx, w, "/probe-wait?"+url.Values{"name": {name}, "owner": {wOwner}}.Encode(), &ok); err != nil {
		return nil, nil
	}
	sleepCtx(ctx, time.Duration(rng.Int64N(int64(2*pc.et))))
	var ka [2]int64
	if err := r.get(ctx, h, "/keepalive", &ka); err != nil {
		return nil, nil
	}
	r.cfg.Logf("probe %d: kill -9 holder n%d", round, h)
	r.kill(h)
	pc.setRoles(w, 0)
	last, deadline := time.Unix(0, ka[0]), time.Unix(0, ka[1])
	pending := false
	var graceEnd time.Time // set when the run ends first
	gaveUp := func() string {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.probeFailed[wOwner]
	}
	for r.Applied.GrantedAt(wOwner).IsZero() {
		if why := gaveUp(); why != "" {
			// The waiter's own session ended (its process was cut off as
			// the leader): not a verdict on the killed holder.
			r.cfg.Logf("probe %d: waiter n%d gave up: %s", round, w, why)
			if err := r.start(h, false); err != nil {
				return nil, err
			}
			return nil, nil
		}
		if ctx.Err() != nil && graceEnd.IsZero() {
			graceEnd = time.Now().Add(probeGrace(last, ttl, pc.et))
		}
		if !graceEnd.IsZero() && time.Now().After(graceEnd) {
			pending = true
			break
		}
		if time.Since(last) > 4*ttl+30*time.Second {
			break // the waiter lost its session: no verdict
		}
		time.Sleep(2 * time.Millisecond) // the parent reads apply events as they come
	}
	at := r.Applied.GrantedAt(wOwner)
	if err := r.start(h, false); err != nil {
		return nil, err
	}
	if at.IsZero() && !pending {
		return nil, nil
	}
	if at.IsZero() {
		at = time.Now()
	}
	res := &probeResult{holder: h, waiter: w, took: at.Sub(last), pending: pending,
		leaderless: leaderless(pc.gapsCopy(), last.Add(ttl), at)}
	if at.Before(deadline) {
		res.early = deadline.Sub(at)
	}
	return res, nil
}

// leaderChurn runs the churn and the probes until ctx ends.
func (r *procRun) leaderChurn(ctx context.Context, rng *rand.Rand, applied map[string]int) []*probeResult {
	var cfg node.Config
	FastConfig(&cfg)
	et := time.Duration(cfg.ElectionTicks) * cfg.TickInterval
	pc := &procChurner{r: r, rng: rand.New(rand.NewPCG(rng.Uint64(), 0x1c)), et: et}
	done := make(chan struct{})
	go func() { defer close(done); pc.run(ctx) }()
	results := probeRounds(ctx, et, cfg.SessionTTL, r.cfg.Logf, func(round int) (*probeResult, error) {
		return pc.probe(ctx, rng, round, cfg.SessionTTL)
	})
	<-done
	applied[ProcLeaderChurn] = pc.hits
	applied["probes"] = len(results)
	return results
}

// ProcRestartHolder: probes in which the holder's process is killed with
// kill -9 and restarted from its data directory at once; its previous
// incarnation's session must be ended by the restart (node/restart.go), so
// the waiter is granted within about a commit of the new process knowing
// the leader, not at the TTL. The verdict is the command that granted the
// waiter: the restart's CloseSession, not the leader's ExpireSession at the
// TTL (on a loaded machine a process can take most of a short TTL to start,
// so the time alone cannot tell them apart). Measured: process start →
// grant applied.
const ProcRestartHolder = "restart-holder"

// restartProbe is one restart probe's outcome: restart → grant, and the
// kind of command that granted the waiter (zero: not granted in 2 TTL).
type restartProbe struct {
	took time.Duration
	by   lockfsm.Kind
}

// restartHolder runs restart probes until ctx ends.
func (r *procRun) restartHolder(ctx context.Context, rng *rand.Rand, applied map[string]int) []restartProbe {
	var cfg node.Config
	FastConfig(&cfg)
	var tooks []restartProbe
	for round := 1; ctx.Err() == nil; round++ {
		lead, err := r.waitLeader(ctx)
		if err != nil {
			continue
		}
		h, w, two := twoBesides(rng, r.ids(), lead, func(id uint64) bool { return !r.isDead(id) })
		if !two {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		name := fmt.Sprintf("restart-probe/%d", round)
		hOwner, wOwner := probeOwnerPrefix+fmt.Sprintf("rh%d", round), probeOwnerPrefix+fmt.Sprintf("rw%d", round)
		var tok uint64
		var ok bool
		if r.get(ctx, h, "/probe-hold?"+url.Values{"name": {name}, "owner": {hOwner}}.Encode(), &tok) != nil ||
			r.get(ctx, w, "/probe-wait?"+url.Values{"name": {name}, "owner": {wOwner}}.Encode(), &ok) != nil {
			continue
		}
		sleepCtx(ctx, 100*time.Millisecond) // the waiter queued
		r.cfg.Logf("restart probe %d: kill -9 holder n%d and restart it at once", round, h)
		r.kill(h)
		started := time.Now()
		if err := r.start(h, false); err != nil {
			r.cfg.Logf("restart n%d: %v", h, err)
			continue
		}
		for r.Applied.GrantedAt(wOwner).IsZero() && time.Since(started) < 2*cfg.SessionTTL {
			time.Sleep(time.Millisecond)
		}
		at := r.Applied.GrantedAt(wOwner)
		if at.IsZero() {
			r.cfg.Logf("restart probe %d: not granted within 2 TTL", round)
			tooks = append(tooks, restartProbe{took: 2 * cfg.SessionTTL})
			continue
		}
		by := r.Applied.GrantedBy(wOwner)
		r.cfg.Logf("restart probe %d: restart → grant %v by %v (TTL %v)", round, at.Sub(started).Round(time.Millisecond), by, cfg.SessionTTL)
		tooks = append(tooks, restartProbe{took: at.Sub(started), by: by})
		sleepCtx(ctx, 200*time.Millisecond)
	}
	applied[ProcRestartHolder] = len(tooks)
	return tooks
}

// restartVerdicts: every restart probe's waiter must be granted by the
// restart ending the old session (its CloseSession), not by the leader
// expiring it at the TTL, and within 2 TTL.
func restartVerdicts(probes []restartProbe, ttl time.Duration, viol func(string, ...any), note func(string)) {
	if len(probes) == 0 {
		return
	}
	var sorted []time.Duration
	for i, p := range probes {
		sorted = append(sorted, p.took)
		switch p.by {
		case 0:
			viol("L3: restart probe %d: the restarted holder's old lock did not reach the next waiter within %v of its restart (TTL %v)", i+1, p.took, ttl)
		case lockfsm.KindExpireSession:
			viol("L3: restart probe %d: the restarted holder's old lock went to the next waiter %v after its restart by the leader's ExpireSession (TTL %v): not ended by the restart", i+1, p.took, ttl)
		}
	}
	slices.Sort(sorted)
	note(fmt.Sprintf("restart-holder: %d probes; restart (process start) → next waiter's grant: min %v, median %v, max %v (TTL %v)",
		len(probes), sorted[0].Round(time.Millisecond), sorted[len(sorted)/2].Round(time.Millisecond),
		sorted[len(sorted)-1].Round(time.Millisecond), ttl))
}
