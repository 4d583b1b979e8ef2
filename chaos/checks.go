package chaos

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node"
)

// AppliedLog collects what every node incarnation's Observer applied. Every
// replica applies the same log, so records at one index must agree; the union
// is the cluster's history of grants.
type AppliedLog struct {
	mu        sync.Mutex
	digest    map[uint64]string
	grants    map[uint64][]grant      // index -> grants in that entry
	owners    map[string]bool         // owners ever granted
	grantedAt map[string]time.Time    // probe owners: when a replica first applied their grant
	grantedBy map[string]lockfsm.Kind // probe owners: the kind of command whose apply granted them
	// In-process runs (Observe): when a replica first applied each owner's
	// grant and the end of its hold (the history checks' bounds, Outcomes).
	holdFrom, holdTo map[string]time.Time
	leaders          map[uint64][]node.LeaderChange // index -> election changes applied there
	divergence       []string
	life             []lifeAt // session and hold changes, in the order first applied (failover.go)
	watch            struct {
		id   uint64
		inc  int
		seen map[uint64]bool // granted tokens the watched incarnation applied
	}
}

type grant struct {
	Name, Owner string
	Token       uint64
	// Shared: a reader's or a semaphore acquisition's grant, whose token
	// other grants of the entry may share (at least every earlier token, not
	// strictly above).
	Shared bool
}

// NewAppliedLog returns an empty log.
func NewAppliedLog() *AppliedLog {
	return &AppliedLog{digest: map[uint64]string{}, grants: map[uint64][]grant{}, owners: map[string]bool{},
		grantedAt: map[string]time.Time{}, grantedBy: map[string]lockfsm.Kind{}, leaders: map[uint64][]node.LeaderChange{},
		holdFrom: map[string]time.Time{}, holdTo: map[string]time.Time{}}
}

func digest(r node.ApplyRecord) string {
	var b strings.Builder
	c := r.Command
	fmt.Fprintf(&b, "%d|%s|%s|%d|%d|", c.Kind, c.Name, c.Owner, c.Session, c.Seq)
	res := r.Result
	fmt.Fprintf(&b, "%v|%d|%d|%d|%v|%v|", res.Err, res.Status, res.Token, res.HoldCount, res.Holder, res.Duplicate)
	for _, e := range r.Events {
		fmt.Fprintf(&b, "%d:%s:%s:%d:%d:%d:%d:%v;", e.Kind, e.Name, e.Owner, e.Session, e.Seq, e.Token, e.Reason, e.FromQueue)
		if e.Mode != 0 || e.Permits != 0 || len(e.ExtraNames) != 0 || e.Value != "" {
			fmt.Fprintf(&b, "%d:%d:%v:%q;", e.Mode, e.Permits, e.ExtraNames, e.Value)
		}
	}
	return b.String()
}

// Observe is the node Observer (loop goroutine: quick, copies what it keeps).
func (l *AppliedLog) Observe(id uint64, inc int, r node.ApplyRecord) {
	var gs []grant
	var lc []node.LeaderChange
	var ended []string
	for _, e := range r.Events {
		switch e.Kind {
		case lockfsm.EventReleased:
			ended = append(ended, e.Owner)
		case lockfsm.EventGranted:
			shared := e.Mode == lockfsm.ModeShared || e.Permits > 0
			gs = append(gs, grant{e.Name, e.Owner, e.Token, shared})
			for _, x := range e.ExtraNames {
				gs = append(gs, grant{x, e.Owner, e.Token, false})
			}
		case lockfsm.EventLeader:
			lc = append(lc, node.LeaderChange{Name: e.Name, Index: r.Index, Session: e.Session, Owner: e.Owner,
				Token: e.Token, Value: e.Value})
		}
	}
	if len(lc) > 0 {
		l.mu.Lock()
		if _, ok := l.leaders[r.Index]; !ok {
			l.leaders[r.Index] = lc
		}
		l.mu.Unlock()
	}
	if len(gs) > 0 || len(ended) > 0 {
		// The first replica to apply an entry is the first to call here
		// for it: its time is the earliest, and the entry's effect (a
		// grant, a hold's end) had happened by then.
		now := time.Now()
		l.mu.Lock()
		for _, g := range gs {
			if _, ok := l.holdFrom[g.Owner]; !ok {
				l.holdFrom[g.Owner] = now
			}
		}
		for _, o := range ended {
			if _, ok := l.holdTo[o]; !ok {
				l.holdTo[o] = now
			}
		}
		l.mu.Unlock()
	}
	l.ObserveDigest(id, inc, r.Index, digest(r), gs, lifeOf(r))
}

// Outcomes is what this log shows of each owner's hold, on h's clock: the
// history checks' facts about operations whose outcome the client did not
// learn. Only in-process runs (Observe) record times; a log fed by
// ObserveDigest alone gives none (the bounds stay open).
func (l *AppliedLog) Outcomes(h *History) Outcomes {
	return func(owner string) LogOutcome {
		l.mu.Lock()
		defer l.mu.Unlock()
		o := LogOutcome{Granted: l.owners[owner]}
		if t, ok := l.holdFrom[owner]; ok {
			o.GrantedBy = h.At(t)
		}
		if t, ok := l.holdTo[owner]; ok {
			o.EndedBy = h.At(t)
		}
		return o
	}
}

// LeaderChanges returns the election changes of name in log order.
func (l *AppliedLog) LeaderChanges(name string) []node.LeaderChange {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []node.LeaderChange
	for _, cs := range l.leaders {
		for _, c := range cs {
			if c.Name == name {
				out = append(out, c)
			}
		}
	}
	slices.SortFunc(out, func(a, b node.LeaderChange) int { return cmp.Compare(a.Index, b.Index) })
	return out
}

// ObserveDigest records one applied entry given as its digest, grants and
// session and hold changes (multi-process mode: node processes send these
// to the parent).
func (l *AppliedLog) ObserveDigest(id uint64, inc int, index uint64, d string, gs []grant, life []lifeRec) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if old, ok := l.digest[index]; ok {
		if old != d && len(l.divergence) < 10 {
			l.divergence = append(l.divergence, fmt.Sprintf("index %d: n%d applied %q, another replica %q", index, id, d, old))
		}
	} else {
		l.digest[index] = d
		now := time.Now()
		for _, r := range life {
			l.life = append(l.life, lifeAt{lifeRec: r, index: index, at: now})
		}
		for _, g := range gs {
			l.grants[index] = append(l.grants[index], g)
			l.owners[g.Owner] = true
			if strings.HasPrefix(g.Owner, probeOwnerPrefix) {
				l.grantedAt[g.Owner] = now
				if k, err := strconv.ParseUint(d[:max(strings.IndexByte(d, '|'), 0)], 10, 8); err == nil {
					l.grantedBy[g.Owner] = lockfsm.Kind(k)
				}
			}
		}
	}
	if l.watch.seen != nil && l.watch.id == id && l.watch.inc == inc {
		for _, g := range gs {
			l.watch.seen[g.Token] = true
		}
	}
}

// GrantedAt is when a replica first applied a grant to a probe owner (zero:
// not yet).
func (l *AppliedLog) GrantedAt(owner string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.grantedAt[owner]
}

// GrantedBy is the kind of command whose apply granted a probe owner (its
// first grant; zero: not yet, or a digest that did not say).
func (l *AppliedLog) GrantedBy(owner string) lockfsm.Kind {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.grantedBy[owner]
}

// lifeCopy is the session and hold changes so far, in index order.
func (l *AppliedLog) lifeCopy() []lifeAt {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.life)
	slices.SortStableFunc(out, func(a, b lifeAt) int { return cmp.Compare(a.index, b.index) })
	return out
}

// Granted reports whether the log ever granted owner.
func (l *AppliedLog) Granted(owner string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.owners[owner]
}

// Watch starts recording the grants that incarnation inc of node id applies.
func (l *AppliedLog) Watch(id uint64, inc int) {
	l.mu.Lock()
	l.watch.id, l.watch.inc, l.watch.seen = id, inc, map[uint64]bool{}
	l.mu.Unlock()
}

// WatchedSaw reports whether the watched incarnation applied a grant with
// this token.
func (l *AppliedLog) WatchedSaw(token uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.watch.seen[token]
}

// Describe returns the applied records at indices from..to (diagnostics).
func (l *AppliedLog) Describe(from, to uint64) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for i := from; i <= to && i-from < 64; i++ {
		if d, ok := l.digest[i]; ok {
			out = append(out, fmt.Sprintf("%d: %s", i, d))
		} else {
			out = append(out, fmt.Sprintf("%d: (not observed)", i))
		}
	}
	return out
}

// Divergence lists indices where replicas applied different records.
func (l *AppliedLog) Divergence() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.divergence)
}

// SessionRuns is how many distinct entries observed were a leader's run of
// a session's end (lockfsm.KindEndSessionRun).
func (l *AppliedLog) SessionRuns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	prefix := fmt.Sprintf("%d|", lockfsm.KindEndSessionRun)
	n := 0
	for _, d := range l.digest {
		if strings.HasPrefix(d, prefix) {
			n++
		}
	}
	return n
}

// Entries is how many distinct indices were observed.
func (l *AppliedLog) Entries() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.digest)
}

// TokenOrder checks S2 on the applied log: per name, grant tokens strictly
// increase in index order (a shared grant's, a reader's or a semaphore
// acquisition's, is at least the last: grants of one entry share it), and a
// token is the index of its granting entry.
func (l *AppliedLog) TokenOrder() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	idx := make([]uint64, 0, len(l.grants))
	for i := range l.grants {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	last := map[string]uint64{}
	var bad []string
	for _, i := range idx {
		for _, g := range l.grants[i] {
			if g.Token < last[g.Name] || (g.Token == last[g.Name] && !g.Shared) || g.Token != i {
				bad = append(bad, fmt.Sprintf("%s: grant to %s at index %d has token %d after %d", g.Name, g.Owner, i, g.Token, last[g.Name]))
			}
			last[g.Name] = max(last[g.Name], g.Token)
		}
	}
	return bad
}

// AckedLost returns the acknowledged grants (ok Lock/TryLock) whose token the
// log never granted to that owner.
func (l *AppliedLog) AckedLost(ops []Op) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var bad []string
	for _, op := range ops {
		if op.Kind == OpUnlock || op.Outcome != OK {
			continue
		}
		found := false
		for _, g := range l.grants[op.Token] {
			found = found || (g.Owner == op.Owner && g.Name == op.Name)
		}
		if !found {
			bad = append(bad, fmt.Sprintf("acknowledged grant %s %s token %d not in the applied log", op.Name, op.Owner, op.Token))
		}
	}
	return bad
}

// ourOwner: owners our clients use look like c<client>-<seq>.
func ourOwner(o string) bool { return strings.HasPrefix(o, "c") && strings.Contains(o, "-") }

// Leftovers lists holders and waiters of our clients still in a node's table.
func Leftovers(ctx context.Context, n *node.Node) ([]string, error) {
	locks, err := n.Locks(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, li := range locks {
		for _, h := range li.Holds {
			if ourOwner(h.Owner) {
				out = append(out, fmt.Sprintf("%s held by %s (session %d, token %d)", li.Name, h.Owner, h.Session, h.Token))
			}
		}
		for _, w := range li.Waiters {
			if ourOwner(w.Owner) {
				out = append(out, fmt.Sprintf("%s waited for by %s (session %d)", li.Name, w.Owner, w.Session))
			}
		}
	}
	return out, nil
}

// A nodeProbe is how the end checks reach the nodes of a run: in this
// process (nodeSetProbe) or through each node process's control socket
// (procRun.probe).
type nodeProbe struct {
	ids       func() []uint64 // the nodes up now
	replicas  func() []uint64 // those of them that keep the log (nil: all; light members do not)
	leftovers func(ctx context.Context, id uint64) []string
	snapshot  func(ctx context.Context, id uint64) (b []byte, applied uint64, err error)
}

// nodeSetProbe reaches the running nodes of c, each query bounded by 1 s.
func nodeSetProbe(c NodeSet) nodeProbe {
	return nodeProbe{
		ids: func() []uint64 {
			var up []uint64
			for _, id := range c.IDs() {
				if c.Node(id) != nil {
					up = append(up, id)
				}
			}
			return up
		},
		leftovers: func(ctx context.Context, id uint64) []string {
			n := c.Node(id)
			if n == nil {
				return nil // down since ids
			}
			qctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			l, err := Leftovers(qctx, n)
			if err != nil {
				return []string{fmt.Sprintf("n%d: %v", id, err)}
			}
			return l
		},
		snapshot: func(ctx context.Context, id uint64) ([]byte, uint64, error) {
			n := c.Node(id)
			if n == nil {
				return nil, 0, fmt.Errorf("n%d is down", id)
			}
			qctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			return n.TableSnapshot(qctx)
		},
	}
}

// checkSettled reports through viol what the end checks find once the nodes
// have had until ctx ends to settle: leftovers, and lock tables that differ.
// phase ("" or, e.g., "after full restart") qualifies the reports.
func (p nodeProbe) checkSettled(ctx context.Context, phase string, viol func(string, ...any)) {
	left, differ := "left behind", ""
	if phase != "" {
		left, differ = "left behind "+phase, phase+": "
	}
	for _, s := range p.waitNoLeftovers(ctx) {
		viol("%s: %s", left, s)
	}
	for _, s := range p.waitIdentical(ctx) {
		viol("%s%s", differ, s)
	}
}

// waitNoLeftovers polls every node until none has leftovers or ctx ends; it
// returns the last poll's, each with its node.
func (p nodeProbe) waitNoLeftovers(ctx context.Context) []string {
	for {
		var last []string
		for _, id := range p.ids() {
			for _, s := range p.leftovers(ctx, id) {
				last = append(last, fmt.Sprintf("n%d: %s", id, s))
			}
		}
		if len(last) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitIdentical polls until every node's lock table is taken at the same
// applied index; it reports S7 violations (same index, different bytes) at
// once, and a timeout if the indices never meet.
func (p nodeProbe) waitIdentical(ctx context.Context) []string {
	for {
		var ref []byte
		var refIdx uint64
		haveRef, same := false, true
		ids := p.ids
		if p.replicas != nil {
			ids = p.replicas
		}
		for _, id := range ids() {
			b, idx, err := p.snapshot(ctx, id)
			if err != nil {
				same = false
				break
			}
			if !haveRef {
				ref, refIdx, haveRef = b, idx, true
				continue
			}
			if idx != refIdx {
				same = false
				break
			}
			if !bytes.Equal(b, ref) {
				return []string{fmt.Sprintf("S7: n%d's lock table differs from n1's at applied index %d (%d vs %d bytes)", id, idx, len(b), len(ref))}
			}
		}
		if same {
			return nil
		}
		select {
		case <-ctx.Done():
			return []string{"nodes never reached the same applied index (S7 not checked)"}
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// explainLive returns a FencedStore.OnLive hook that logs what a live
// overlap looked like: both holders, whether the entering one was live, the
// applied entries between the two grants, and when (and why) the earlier
// holder's Context was finally cancelled, if it was before its section
// ended. Waiting for that stops when stop closes; wg counts the waiters.
func explainLive(applied *AppliedLog, logf func(string, ...any), stop <-chan struct{}, wg *sync.WaitGroup) func(prev, next *Section) {
	return func(prev, next *Section) {
		at := time.Now()
		nextLive := "live"
		if next.Live != nil && !next.Live() {
			nextLive = "not live"
			if next.Ctx != nil && next.Ctx.Err() != nil {
				nextLive = fmt.Sprintf("already cancelled (%v)", context.Cause(next.Ctx))
			}
		}
		logf("LIVE OVERLAP on %s: %s (token %d, node %016x, entered %v before) still live when %s (token %d, node %016x, %s) entered",
			next.Name, prev.Owner, prev.Token, prev.Node, at.Sub(prev.At).Round(time.Millisecond), next.Owner, next.Token, next.Node, nextLive)
		for _, d := range applied.Describe(min(prev.Token, next.Token), max(prev.Token, next.Token)) {
			logf("  applied %s", d)
		}
		if prev.Ctx == nil {
			return
		}
		exited := prev.exited
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-prev.Ctx.Done():
				logf("  %s's hold (token %d) was cancelled %v after the overlap: %v", prev.Owner, prev.Token,
					time.Since(at).Round(time.Millisecond), context.Cause(prev.Ctx))
			case <-exited:
				logf("  %s left its section %v after the overlap, its hold still not cancelled", prev.Owner,
					time.Since(at).Round(time.Millisecond))
			case <-stop:
			}
		}()
	}
}
