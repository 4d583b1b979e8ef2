package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockraft/lockraft"
	"github.com/lockraft/lockraft/bench/internal/childproc"
)

// keepaliveMetric is the histogram of a member's keepalive round trips.
const keepaliveMetric = "lockraft_keepalive_duration_seconds"

// formation starts the fleet and waits until it can serve: phase 1.
func formation(f *fleet, rep *report, learners int) error {
	size, batch := *flagSize, max(*flagBatch, 1)
	progress("starting %d members, %d processes at a time", size, batch)
	first := time.Now()
	if err := f.start(size, batch, *flagOwn, *flagPerProc); err != nil {
		return err
	}
	var last time.Time
	for _, m := range f.all() {
		if m.ready.After(last) {
			last = m.ready
		}
	}
	progress("all started in %v; waiting until every member can lock and the configuration holds %d voters and %d learners",
		dur(last.Sub(first)), founderCount, learners)
	formed, err := f.waitFormed(learners, 10*time.Minute)
	if err != nil {
		return err
	}
	const phase = "1 formation"
	rep.add(phase, fmt.Sprintf("start all %d children (%d at a time; each until READY)", size, batch), dur(last.Sub(first)), "")
	rep.add("", fmt.Sprintf("last READY → all can lock, %d voters + %d learners", founderCount, learners), dur(formed.Sub(last)), "readyz 200 on every member; the configuration from m0's members view")
	rep.add("", "first start → the same", dur(formed.Sub(first)), "")
	progress("formed; settling for %v", *flagSettle)
	time.Sleep(*flagSettle)
	if err := f.readRoles(); err != nil {
		return err
	}
	var voters, learnerNames []string
	for _, m := range f.withRole(lockraft.RoleVoter) {
		voters = append(voters, m.name)
	}
	for _, m := range f.withRole(lockraft.RoleLearner) {
		learnerNames = append(learnerNames, m.name)
	}
	rep.add("", "roles after settling (each member's status)",
		fmt.Sprintf("leader %s; voters %s; learners %s; %d light", f.leader().name, strings.Join(voters, " "),
			strings.Join(learnerNames, " "), len(f.withRole(lockraft.RoleLight))), "")
	return nil
}

// reading is one member's counters at one instant.
type reading struct {
	at        time.Time
	cpuUs     int64     // user+system CPU time so far
	switches  int64     // voluntary context switches so far
	keepalive histogram // light members only
}

// readAll reads every member's counters, 16 at a time.
func readAll(ms []*member) ([]reading, error) {
	out := make([]reading, len(ms))
	errs := make([]error, len(ms))
	forEach(len(ms), 16, func(i int) {
		m := ms[i]
		code, body := get(m.url + "/stats")
		var st map[string]int64
		if code != 200 || json.Unmarshal([]byte(body), &st) != nil {
			errs[i] = fmt.Errorf("%s: /stats: %d %s", m.name, code, body)
			return
		}
		r := reading{at: time.Now(), cpuUs: st["cpu_us"], switches: childproc.CtxSwitches(m.Pid())}
		if m.role == lockraft.RoleLight {
			code, body := get(m.url + "/metrics")
			if code != 200 {
				errs[i] = fmt.Errorf("%s: /metrics: %d %s", m.name, code, body)
				return
			}
			h, err := parseHistogram(body, keepaliveMetric)
			if err != nil {
				errs[i] = fmt.Errorf("%s: /metrics: %w", m.name, err)
				return
			}
			r.keepalive = h
		}
		out[i] = r
	})
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// leaderCommit is the leader's commit index.
func leaderCommit(f *fleet) uint64 {
	var st lockraft.StatusView
	_, body := get(f.leader().url + "/lockraft/status")
	json.Unmarshal([]byte(body), &st)
	return st.Commit
}

// idleFigures is one member's figures over the idle window.
type idleFigures struct {
	m      *member
	cpuPct float64 // % of one core
	rssMiB float64
	wakes  float64 // voluntary context switches per second
}

// idle measures the fleet with no lock traffic: phase 2.
func idle(f *fleet, rep *report) error {
	ms := f.alive()
	progress("idle window of %v", *flagIdle)
	commit0 := leaderCommit(f)
	r0, err := readAll(ms)
	if err != nil {
		return err
	}
	time.Sleep(*flagIdle)
	r1, err := readAll(ms)
	if err != nil {
		return err
	}
	commits := leaderCommit(f) - commit0
	var figs []idleFigures
	keepalive := histogram{}
	var totalRSS float64
	for i, m := range ms {
		secs := r1[i].at.Sub(r0[i].at).Seconds()
		// A process's figures, shared by the members in it.
		share := float64(max(m.perProc, 1))
		fig := idleFigures{m: m,
			cpuPct: float64(r1[i].cpuUs-r0[i].cpuUs) / (secs * 1e6) * 100 / share,
			rssMiB: float64(childproc.RSSKiB(m.Pid())) / 1024 / share,
			wakes:  float64(r1[i].switches-r0[i].switches) / secs / share}
		figs = append(figs, fig)
		totalRSS += fig.rssMiB
		if m.role == lockraft.RoleLight {
			keepalive.add(r1[i].keepalive.sub(r0[i].keepalive))
		}
	}
	const phase = "2 idle"
	rep.add(phase, fmt.Sprintf("window (after settling %v)", *flagSettle), dur(*flagIdle), fmt.Sprintf("raft entries committed meanwhile: %d", commits))
	for _, fig := range figs {
		if fig.m.leader {
			rep.add("", fmt.Sprintf("leader (%s) CPU %% of a core", fig.m.name), fmt.Sprintf("%.3f", fig.cpuPct), "")
			rep.add("", "leader RSS", fmt.Sprintf("%.1f MiB", fig.rssMiB), "")
			rep.add("", "leader wake-ups/s (voluntary context switches)", fmt.Sprintf("%.0f", fig.wakes), "")
		}
	}
	groups := []struct {
		label string
		keep  func(m *member) bool
	}{
		{"follower voters", func(m *member) bool { return m.role == lockraft.RoleVoter && !m.leader }},
		{"learners", func(m *member) bool { return m.role == lockraft.RoleLearner }},
		{"light members", func(m *member) bool { return m.role == lockraft.RoleLight }},
	}
	for _, g := range groups {
		var in []idleFigures
		for _, fig := range figs {
			if g.keep(fig.m) {
				in = append(in, fig)
			}
		}
		if len(in) == 0 {
			continue
		}
		cpu := func(x idleFigures) float64 { return x.cpuPct }
		rss := func(x idleFigures) float64 { return x.rssMiB }
		wakes := func(x idleFigures) float64 { return x.wakes }
		rep.add("", fmt.Sprintf("%s (%d) CPU %% median / max", g.label, len(in)), fmt.Sprintf("%.3f / %.3f", childproc.Median(in, cpu), childproc.MaxOf(in, cpu)), "")
		rep.add("", fmt.Sprintf("%s RSS median / max", g.label), fmt.Sprintf("%.1f / %.1f MiB", childproc.Median(in, rss), childproc.MaxOf(in, rss)), "")
		rep.add("", fmt.Sprintf("%s wake-ups/s median / max", g.label), fmt.Sprintf("%.0f / %.0f", childproc.Median(in, wakes), childproc.MaxOf(in, wakes)), "")
	}
	rep.add("", fmt.Sprintf("total RSS of all %d members (%d processes)", len(ms), len(procs(ms))), fmt.Sprintf("%.0f MiB", totalRSS), fmt.Sprintf("%.1f MiB a member", totalRSS/float64(len(ms))))
	if *flagPerProc > 1 {
		rep.add("", "members sharing a process", fmt.Sprintf("%d a process after m%d", *flagPerProc, *flagOwn-1),
			"CPU, RSS and wake-ups of such a member: its process's, divided by the members in it")
	}
	light := len(f.withRole(lockraft.RoleLight))
	rep.add("", fmt.Sprintf("keepalive round trip, all %d light members", light),
		fmt.Sprintf("p50 %s, p99 %s, max %s", bucketText(keepalive, keepalive.quantile(0.5)), bucketText(keepalive, keepalive.quantile(0.99)),
			bucketText(keepalive, keepalive.quantile(1))),
		fmt.Sprintf("%d keepalives (about %.0f expected: one per %v each); buckets double from 0.5ms", keepalive.count(),
			float64(light)*flagIdle.Seconds()/keepaliveInterval.Seconds(), keepaliveInterval))
	return nil
}

// lockLatency compares sequential Lock+Unlock on a light member with a
// follower voter's, the leader's as a reference: phase 3.
func lockLatency(f *fleet, rep *report) error {
	lights, voters := f.withRole(lockraft.RoleLight), f.followerVoters()
	if len(lights) == 0 || len(voters) == 0 {
		return fmt.Errorf("%d light members and %d follower voters: one of each needed", len(lights), len(voters))
	}
	targets := []struct {
		label string
		m     *member
		p50   []float64
		p99   []float64
		errs  int
		first string
	}{
		{label: "light member", m: lights[len(lights)/2]},
		{label: "follower voter", m: voters[0]},
		{label: "leader (reference)", m: f.leader()},
	}
	progress("lock latency: %d rounds of %d pairs on %s (light), %s (follower voter), %s (leader)",
		*flagRounds, *flagPairs, targets[0].m.name, targets[1].m.name, targets[2].m.name)
	for round := range max(*flagRounds, 1) {
		for k := range targets {
			t := &targets[k]
			u := fmt.Sprintf("%s/seq?pairs=%d&prefix=seq-%s-%d", t.m.url, *flagPairs, t.m.name, round)
			code, body := childproc.Get(u, 10*time.Minute)
			var s seqReply
			if code != 200 || json.Unmarshal([]byte(body), &s) != nil {
				return fmt.Errorf("%s: /seq: %d %s", t.m.name, code, body)
			}
			t.p50 = append(t.p50, s.P50us)
			t.p99 = append(t.p99, s.P99us)
			t.errs += s.Errors
			if t.first == "" {
				t.first = s.Error
			}
		}
	}
	ident := func(v float64) float64 { return v }
	const phase = "3 lock latency"
	for i, t := range targets {
		var rounds []string
		for _, v := range t.p50 {
			rounds = append(rounds, fmt.Sprintf("%.0f", v))
		}
		note := fmt.Sprintf("p50 per round (µs): %s; errors %d", strings.Join(rounds, ", "), t.errs)
		if t.first != "" {
			note += " (" + t.first + ")"
		}
		p := ""
		if i == 0 {
			p = phase
		}
		rep.add(p, fmt.Sprintf("%s (%s): Lock+Unlock p50 (p99)", t.label, t.m.name),
			fmt.Sprintf("%.0f µs (%.0f µs)", childproc.Median(t.p50, ident), childproc.Median(t.p99, ident)), note)
	}
	ratio := childproc.Median(targets[0].p50, ident) / childproc.Median(targets[1].p50, ident)
	verdict := "met"
	if ratio > 1.5 {
		verdict = "not met"
	}
	rep.add("", "light p50 / follower voter p50 (medians of the rounds)", fmt.Sprintf("%.2f×", ratio), "target ≤ 1.5×: "+verdict)
	return nil
}

// waitResult is one waiter's /acquire.
type waitResult struct {
	name   string
	holder *member
	waiter *member
	code   int
	reply  lockReply
	body   string
}

// crashedHolders kills light members holding locks others wait for, all
// at once, and times each lock's passing to its waiter: phase 4.
func crashedHolders(f *fleet, rep *report) error {
	const phase = "4 crashed holders"
	lights := f.withRole(lockraft.RoleLight)
	nKill := min(int(math.Round(*flagKill*float64(len(lights)))), len(lights)-1)
	if nKill < 1 {
		rep.add(phase, "skipped", "", fmt.Sprintf("-kill %g of %d light members is none", *flagKill, len(lights)))
		return nil
	}
	// Spread the holders over the light members; the rest survive. Light
	// members that share a process die together: whole processes are
	// picked (those of light members only) until nKill members are.
	doomed := map[*member]bool{}
	step := float64(len(lights)) / float64(nKill)
	for k := 0; k < len(lights) && len(doomed) < nKill; k++ {
		m := lights[min(int(float64(k)*step), len(lights)-1)]
		if doomed[m] || !allLight(f, m.Proc) {
			continue
		}
		for _, o := range f.alive() {
			if o.Proc == m.Proc {
				doomed[o] = true
			}
		}
	}
	var holders, survivors []*member
	for _, m := range lights {
		if doomed[m] {
			holders = append(holders, m)
		} else {
			survivors = append(survivors, m)
		}
	}
	progress("crashed holders: %d light members take a lock each", len(holders))
	holdErrs := make([]error, len(holders))
	forEach(len(holders), 16, func(i int) {
		h := holders[i]
		code, body := childproc.Get(fmt.Sprintf("%s/hold?name=churn/%d", h.url, h.idx), 70*time.Second)
		var r lockReply
		if code != 200 || json.Unmarshal([]byte(body), &r) != nil || r.Error != "" {
			holdErrs[i] = fmt.Errorf("%s: /hold churn/%d: %d %s", h.name, h.idx, code, strings.TrimSpace(body))
		}
	})
	for _, err := range holdErrs {
		if err != nil {
			return err
		}
	}
	// A surviving light member waits on each name, the waiters spread
	// round robin over the survivors.
	const acquireTimeout = 2 * time.Minute
	results := make([]waitResult, len(holders))
	var wg sync.WaitGroup
	waiters := map[*member]bool{}
	for k, h := range holders {
		w := survivors[k%len(survivors)]
		waiters[w] = true
		results[k] = waitResult{name: fmt.Sprintf("churn/%d", h.idx), holder: h, waiter: w}
		wg.Go(func() {
			r := &results[k]
			u := fmt.Sprintf("%s/acquire?name=%s&timeout=%v", w.url, url.QueryEscape(r.name), acquireTimeout)
			r.code, r.body = childproc.Get(u, acquireTimeout+30*time.Second)
			if r.code == 200 {
				json.Unmarshal([]byte(r.body), &r.reply)
			}
		})
	}
	queued := confirmQueued(f.leader(), results, 30*time.Second)
	progress("%d of %d waiters queued behind their holders; killing the %d holders at once", queued, len(results), len(holders))
	for _, h := range holders {
		h.dead = true
	}
	killedAt := childproc.KillAll(procs(holders))
	wg.Wait()

	var took []time.Duration
	var failures []string
	early := 0
	for _, r := range results {
		if r.code != 200 || r.reply.Error != "" || r.reply.GrantedUnixNano == 0 {
			failures = append(failures, fmt.Sprintf("%s at %s: %d %s", r.name, r.waiter.name, r.code, strings.TrimSpace(r.body)))
			continue
		}
		d := time.Unix(0, r.reply.GrantedUnixNano).Sub(killedAt)
		if d < 0 {
			early++
		}
		took = append(took, d)
	}
	rep.add(phase, "light members killed at once (SIGKILL), each holding churn/<i>", fmt.Sprintf("%d of %d", len(holders), len(lights)),
		fmt.Sprintf("%d waiters on %d surviving light members; %d seen queued behind the holder on the leader's lock view", len(results), len(waiters), queued))
	bound := sessionTTL + 5*tick
	// The leader counts a session's TTL from its last keepalive received;
	// the holder's last one may have been sent just before the kill and
	// never arrived, so the one before it counts: up to two intervals
	// before the kill.
	earliest := sessionTTL - 2*keepaliveInterval
	if len(took) > 0 {
		slices.Sort(took)
		over := 0
		for _, d := range took {
			if d > bound {
				over++
			}
		}
		rep.add("", "kill → grant at the waiter: p50 / max", fmt.Sprintf("%s / %s", dur(took[(len(took)-1)/2]), dur(took[len(took)-1])),
			fmt.Sprintf("TTL + slack (5 ticks) = %v: %d of %d over", bound, over, len(took)))
		rep.add("", "kill → grant: min", dur(took[0]),
			fmt.Sprintf("≥ TTL − two keepalive intervals = %v after the kill (a keepalive sent just before it may never arrive); granted before the kill: %d", earliest, early))
	}
	note := ""
	if len(failures) > 0 {
		note = failures[0]
	}
	rep.add("", "waiters that failed", fmt.Sprint(len(failures)), note)
	return nil
}

// allLight reports whether every live member in process p is light.
func allLight(f *fleet, p *childproc.Proc) bool {
	for _, m := range f.alive() {
		if m.Proc == p && m.role != lockraft.RoleLight {
			return false
		}
	}
	return true
}

// confirmQueued waits up to within until the leader's lock view shows each
// name held by its holder with its waiter queued, and returns how many
// were.
func confirmQueued(leader *member, results []waitResult, within time.Duration) int {
	deadline := time.Now().Add(within)
	done := make([]bool, len(results))
	for {
		forEach(len(results), 8, func(i int) {
			if done[i] {
				return
			}
			r := results[i]
			code, body := get(fmt.Sprintf("%s/lockraft/lock?name=%s", leader.url, url.QueryEscape(r.name)))
			var v lockraft.LockView
			if code != 200 || json.Unmarshal([]byte(body), &v) != nil || v.Holder == nil || v.Holder.Member != r.holder.id {
				return
			}
			for _, w := range v.Waiters {
				if w.Member == r.waiter.id {
					done[i] = true
				}
			}
		})
		n := 0
		for _, d := range done {
			if d {
				n++
			}
		}
		if n == len(results) || time.Now().After(deadline) {
			return n
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// loadEvent is one /load call: when it was sent and when it returned, the
// pairs it did and the calls that failed.
type loadEvent struct {
	sent, returned time.Time
	pairs, errors  int
}

// loadChunk is the pairs each caller does per /load call: small, so that
// the calls return often and the load ends soon after it is finished.
const loadChunk = 20

// s2Load is an S2 load: callers on distinct names, spread over members,
// each member's share driven by a loop of /load calls until it is finished.
type s2Load struct {
	mu       sync.Mutex
	events   []loadEvent
	finished atomic.Bool
	wg       sync.WaitGroup
	started  time.Time
}

// startLoad starts callers callers spread over up to callers of ms.
func startLoad(ms []*member, callers int) (*s2Load, []*member) {
	l := &s2Load{started: time.Now()}
	n := min(callers, len(ms))
	var loaders []*member
	for k := range n {
		m := ms[k*len(ms)/n]
		loaders = append(loaders, m)
		c := callers/n + btoi(k < callers%n)
		l.wg.Go(func() {
			for !l.finished.Load() {
				ev := loadEvent{sent: time.Now()}
				code, body := childproc.Get(fmt.Sprintf("%s/load?callers=%d&pairs=%d&prefix=s2-%s", m.url, c, loadChunk, m.name), 6*time.Minute)
				ev.returned = time.Now()
				var r map[string]int
				if code != 200 || json.Unmarshal([]byte(body), &r) != nil {
					ev.errors = c * loadChunk
					time.Sleep(100 * time.Millisecond)
				} else {
					ev.errors = r["errors"]
					ev.pairs = c*loadChunk - ev.errors
				}
				l.mu.Lock()
				l.events = append(l.events, ev)
				l.mu.Unlock()
			}
		})
	}
	return l, loaders
}

// finish ends the load once every call in flight has returned.
func (l *s2Load) finish() {
	l.finished.Store(true)
	l.wg.Wait()
}

// rate is the pairs per second done in [from, to] (a call's pairs counted
// as spread evenly over its time in flight), and the errors of the calls
// that returned in that span.
func (l *s2Load) rate(from, to time.Time) (float64, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pairs, errs := 0.0, 0
	for _, ev := range l.events {
		if ev.returned.After(from) && !ev.returned.After(to) {
			errs += ev.errors
		}
		a, b := ev.sent, ev.returned
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		if span := ev.returned.Sub(ev.sent); b.After(a) && span > 0 {
			pairs += float64(ev.pairs) * float64(b.Sub(a)) / float64(span)
		}
	}
	return pairs / to.Sub(from).Seconds(), errs
}

// btoi is 1 for true.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// loadBaseline is how long the S2 load runs before the voter is killed.
const loadBaseline = 10 * time.Second

// victimState is the killed voter's entry in a members view, in words.
func victimState(v *lockraft.MemberView) string {
	if v == nil {
		return "not listed"
	}
	return fmt.Sprintf("%s, gossip %q, healthy %t", v.Role, v.Gossip, v.Healthy)
}

// replaceVoter kills a follower voter under an S2 load and times its
// replacement by a standby: phase 5.
func replaceVoter(f *fleet, rep *report, learners int) error {
	const phase = "5 voter replacement"
	if err := f.readRoles(); err != nil {
		return err
	}
	leader, voters := f.leader(), f.followerVoters()
	if len(voters) == 0 {
		return fmt.Errorf("no follower voter")
	}
	// The highest-numbered follower voter, so that m0 (the gossip seed)
	// stays unless it is the only one.
	victim := slices.MaxFunc(voters, func(a, b *member) int { return a.idx - b.idx })
	others := slices.DeleteFunc(f.alive(), func(m *member) bool { return m == victim })
	load, loaders := startLoad(others, *flagCallers)
	deadVoter := *flagDeadVoter
	if deadVoter <= 0 {
		deadVoter = 5 * time.Minute
	}
	progress("voter replacement: S2 load of %d callers on %d members; killing voter %s in %v (its replacement waits DeadVoterAfter %v)",
		*flagCallers, len(loaders), victim.name, loadBaseline, deadVoter)
	time.Sleep(loadBaseline)
	killedAt := childproc.KillAll([]*childproc.Proc{victim.Proc})
	victim.dead = true

	var unhealthyAt, failedAt, removedAt, restoredAt, standbysAt, loadEndedAt time.Time
	deadline := killedAt.Add(deadVoter + 3*time.Minute)
	lastNote, lastState := time.Now(), ""
	var roles map[string]int
	for {
		now := time.Now()
		code, body := get(leader.url + "/lockraft/members?timeout=2s")
		var mv lockraft.MembersView
		if code == 200 && json.Unmarshal([]byte(body), &mv) == nil {
			var v *lockraft.MemberView
			for i := range mv.Members {
				if mv.Members[i].ID == victim.id {
					v = &mv.Members[i]
				}
			}
			if unhealthyAt.IsZero() && (v == nil || !v.Healthy) {
				unhealthyAt = now
			}
			if failedAt.IsZero() && (v == nil || v.Gossip != "alive") {
				failedAt = now
			}
			if removedAt.IsZero() && (v == nil || v.Role != lockraft.RoleVoter) {
				removedAt = now
			}
			roles = countRoles(mv, victim.id)
			state := fmt.Sprintf("voters %d, learners %d; %s: %s", roles[lockraft.RoleVoter], roles[lockraft.RoleLearner], victim.name, victimState(v))
			if state != lastState {
				lastState = state
				progress("%v after the kill, the leader's members view: %s", dur(now.Sub(killedAt)), state)
			}
			if restoredAt.IsZero() && !removedAt.IsZero() && roles[lockraft.RoleVoter] == founderCount {
				restoredAt = now
				load.finish()
				loadEndedAt = time.Now()
				progress("5 voters again %v after the kill; load ended", dur(restoredAt.Sub(killedAt)))
			}
			if !restoredAt.IsZero() && roles[lockraft.RoleLearner] == learners {
				standbysAt = now
				break
			}
		}
		if now.After(deadline) || (!restoredAt.IsZero() && now.Sub(restoredAt) > 2*time.Minute) {
			break
		}
		if now.Sub(lastNote) > 30*time.Second {
			lastNote = now
			progress("%v after the kill: voters %d, learners %d (victim: unhealthy %t, gossip failed %t, removed %t)",
				dur(now.Sub(killedAt)), roles[lockraft.RoleVoter], roles[lockraft.RoleLearner], !unhealthyAt.IsZero(), !failedAt.IsZero(), !removedAt.IsZero())
		}
		time.Sleep(250 * time.Millisecond)
	}
	if loadEndedAt.IsZero() {
		load.finish()
		loadEndedAt = time.Now()
	}
	since := func(t time.Time) string {
		if t.IsZero() {
			return "not seen"
		}
		return dur(t.Sub(killedAt))
	}
	rep.add(phase, fmt.Sprintf("follower voter %s killed (SIGKILL) under S2 load", victim.name), "",
		fmt.Sprintf("%d callers on distinct names, over %d surviving members; the leader %s's members view polled every 250 ms", *flagCallers, len(loaders), leader.name))
	rep.add("", "kill → the leader sees it unhealthy", since(unhealthyAt), "")
	rep.add("", "kill → gossip says it failed", since(failedAt), "")
	rep.add("", "kill → out of the voters", since(removedAt), fmt.Sprintf("VoterPolicy.DeadVoterAfter %v", deadVoter))
	rep.add("", fmt.Sprintf("kill → %d voters again (a standby promoted)", founderCount), since(restoredAt), "")
	rep.add("", fmt.Sprintf("kill → %d learners again", learners), since(standbysAt), "a light member added as a standby")
	before, errsBefore := load.rate(load.started, killedAt)
	during, errsDuring := load.rate(killedAt, loadEndedAt)
	rep.add("", "S2 pairs/s: before the kill / from the kill to 5 voters", fmt.Sprintf("%.0f / %.0f", before, during),
		fmt.Sprintf("over %v / %v (the load ends once 5 voters are seen)", dur(killedAt.Sub(load.started)), dur(loadEndedAt.Sub(killedAt))))
	rep.add("", "S2 errors: before / during", fmt.Sprintf("%d / %d", errsBefore, errsDuring), "")
	if restoredAt.IsZero() {
		return fmt.Errorf("the voters were not %d again within %v of the kill", founderCount, dur(time.Since(killedAt)))
	}
	return nil
}
