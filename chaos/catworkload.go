package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node"
)

// The catalogue's workloads (WorkloadOptions.Primitives): clients take
// read-write locks, semaphore permits, election leadership and multi-name
// locks on names of their own, with the mutex's choices (try or wait,
// random timeouts and hold times), write to the fenced store inside every
// critical section, and release. Observers on every node watch the
// elections; each observation must be exactly the changes the log applied
// (CheckObservations).

var (
	rwNames        = []string{"r1", "r2"}
	semNames       = []string{"s1", "s2"}
	semLimits      = []int{2, 3}
	electionNames  = []string{"e1", "e2"}
	multiGroups    = [][]string{{"ma", "mb", "mc"}, {"md", "me", "mf"}}
	multiGroupKeys = []string{"g1", "g2"}
)

// Observation is what one observer on one node saw of one election, until
// it ended (its node crashed or stopped, or the run ended).
type Observation struct {
	Node    uint64
	Name    string
	Changes []node.LeaderChange
	End     string // why it ended
}

// observeLoop keeps an observer of name running on node id for as long as
// the run lasts, a new one for each incarnation of the node.
func (w *Workload) observeLoop(ctx context.Context, id uint64, name string) {
	for ctx.Err() == nil {
		n := w.c.Node(id)
		if n == nil {
			sleepCtx(ctx, 20*time.Millisecond)
			continue
		}
		o, err := n.Observe(ctx, name)
		if err != nil {
			sleepCtx(ctx, 20*time.Millisecond)
			continue
		}
		obs := &Observation{Node: id, Name: name}
		w.obsMu.Lock()
		w.Observations = append(w.Observations, obs)
		w.obsMu.Unlock()
		for {
			c, err := o.Next(ctx)
			if err != nil {
				w.obsMu.Lock()
				obs.End = err.Error()
				w.obsMu.Unlock()
				break
			}
			w.obsMu.Lock()
			obs.Changes = append(obs.Changes, c)
			w.obsMu.Unlock()
		}
		o.Close()
		if ctx.Err() == nil {
			sleepCtx(ctx, 20*time.Millisecond)
		}
	}
}

// catalogueOp is one acquisition of prim, its critical section and its
// release.
func (w *Workload) catalogueOp(ctx context.Context, rng *rand.Rand, client int, id uint64, n *node.Node, owner, prim string) {
	wait := rng.Float64() >= w.opts.TryLockShare
	timeout := time.Duration(float64(w.opts.MaxWait) * (0.05 + 0.95*rng.Float64()))
	hold := time.Duration(float64(w.opts.MaxHold) * rng.Float64())
	if w.opts.LongHoldShare > 0 && rng.Float64() < w.opts.LongHoldShare {
		hold = time.Duration(float64(w.opts.LongHold) * rng.Float64())
	}
	op := Op{Client: client, Node: id, Owner: owner, Prim: prim}
	req := node.Request{Owner: owner}
	switch prim {
	case PrimRW:
		op.Name = rwNames[rng.IntN(len(rwNames))]
		op.Shared = rng.Float64() < 0.7
		req.Primitive, req.Shared = lockfsm.PrimRW, op.Shared
	case PrimSemaphore:
		i := rng.IntN(len(semNames))
		op.Name, op.Limit = semNames[i], semLimits[i]
		op.Permits = 1 + rng.IntN(min(2, op.Limit))
		req.Primitive, req.Permits, req.Limit = lockfsm.PrimSemaphore, uint32(op.Permits), uint32(op.Limit)
	case PrimElection:
		op.Name = electionNames[rng.IntN(len(electionNames))]
		wait = true // a campaign waits
		req.Primitive, req.Value = lockfsm.PrimElection, owner
	case PrimMulti:
		g := rng.IntN(len(multiGroups))
		op.Group = multiGroupKeys[g]
		names := slices.Clone(multiGroups[g])
		rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		if rng.Float64() < 0.6 {
			names = names[:2+rng.IntN(len(names)-1)]
		} else {
			names = names[:1]
		}
		op.Names, op.Name = names, names[0]
		req.ExtraNames = names[1:]
	default:
		panic("unknown primitive " + prim)
	}
	req.Name, req.Wait = op.Name, wait
	op.Kind = acquireKind(wait)
	rec := w.H.BeginOp(op)
	actx, cancel := context.WithTimeout(context.Background(), timeout)
	h, err := n.AcquireWith(actx, req)
	cancel()
	w.endAcquire(rec, h, err, wait)
	if err != nil {
		if !errors.Is(err, lockerr.ErrLocked) {
			sleepCtx(ctx, time.Duration(rng.IntN(20))*time.Millisecond)
		}
		return
	}
	w.catalogueSection(ctx, rng, id, n, h, op, hold)
	uop := op
	uop.Kind = OpUnlock
	urec := w.H.BeginOp(uop)
	w.H.SetHeldFrom(urec, rec.End)
	w.release(urec, h)
}

// catalogueSection writes to the store with the hold's token on every name
// it holds, at entry, in between and at exit, stopping as soon as the hold
// is lost. An election leader proclaims a new value once, half the time.
func (w *Workload) catalogueSection(ctx context.Context, rng *rand.Rand, id uint64, n *node.Node, h *node.Hold, op Op, hold time.Duration) {
	live := func() bool {
		return h.Context().Err() == nil && w.c.PauseGate(id) == nil
	}
	names := op.Names
	if len(names) == 0 {
		names = []string{op.Name}
	}
	var secs []*Section
	for _, name := range names {
		sec := &Section{Name: name, Owner: op.Owner, Token: h.Token(), Live: live, Node: n.ID(), Ctx: h.Context()}
		switch {
		case op.Prim == PrimRW && op.Shared:
			sec.Kind = SectionShared
		case op.Prim == PrimSemaphore:
			sec.Kind, sec.Permits, sec.Limit = SectionPermits, op.Permits, op.Limit
		}
		secs = append(secs, w.Store.EnterSection(sec))
	}
	defer func() {
		for _, sec := range secs {
			w.Store.Exit(sec)
		}
	}()
	proclaim := op.Prim == PrimElection && rng.IntN(2) == 0
	steps := 3
	for i := 0; i < steps; i++ {
		w.waitUnpaused(ctx, id)
		if h.Context().Err() != nil {
			return
		}
		for _, sec := range secs {
			w.Store.Write(sec)
		}
		if proclaim && i == 1 {
			pop := op
			pop.Kind = OpProclaim
			prec := w.H.BeginOp(pop)
			pctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := h.Proclaim(pctx, fmt.Sprintf("%s/%d", op.Owner, i))
			cancel()
			if err == nil {
				w.H.End(prec, OK, h.Token(), nil)
			} else {
				w.H.End(prec, Unknown, h.Token(), err)
			}
		}
		if i < steps-1 {
			sleepCtx(h.Context(), hold/time.Duration(steps-1))
		}
	}
}

// CheckObservations checks every observation against the applied log: its
// first change is the election's state at the index it was read at, and
// the rest are exactly the changes the log applied after it, in order, none
// missed, repeated or folded into another. An observation may stop short
// (its node crashed or stopped, the run ended, or it ended with
// lockerr.ErrObserveLagged: told, not silent); nothing else is accepted.
func CheckObservations(obs []*Observation, applied *AppliedLog) []string {
	var bad []string
	byName := map[string][]node.LeaderChange{}
	for _, o := range obs {
		if len(o.Changes) == 0 {
			continue
		}
		all, ok := byName[o.Name]
		if !ok {
			all = applied.LeaderChanges(o.Name)
			byName[o.Name] = all
		}
		first := o.Changes[0]
		var state node.LeaderChange
		k := 0
		for k < len(all) && all[k].Index <= first.Index {
			state = all[k]
			k++
		}
		same := func(a, b node.LeaderChange) bool {
			return a.Session == b.Session && a.Owner == b.Owner && a.Token == b.Token && a.Value == b.Value
		}
		if !same(state, first) {
			bad = append(bad, fmt.Sprintf("observer of %s on n%d: first change %v, but the log had %v at index %d",
				o.Name, o.Node, first, state, first.Index))
			continue
		}
		for i, c := range o.Changes[1:] {
			if k < len(all) && c == all[k] {
				k++
				continue
			}
			want := "nothing more"
			if k < len(all) {
				want = all[k].String()
			}
			bad = append(bad, fmt.Sprintf("observer of %s on n%d: got %v where the log applied %s (a change missed, repeated or out of order; after %v, its item %d, first %v, ended %q)",
				o.Name, o.Node, c, want, o.Changes[i], i+1, first, o.End))
			break
		}
	}
	return bad
}

// observations returns the workload's observations (copies).
func (w *Workload) observations() []*Observation {
	w.obsMu.Lock()
	defer w.obsMu.Unlock()
	out := make([]*Observation, len(w.Observations))
	for i, o := range w.Observations {
		c := *o
		c.Changes = slices.Clone(o.Changes)
		out[i] = &c
	}
	return out
}

// OpsByPrimitive counts completed operations per primitive.
func OpsByPrimitive(ops []Op) map[string]int {
	m := map[string]int{}
	for _, op := range ops {
		p := op.Prim
		if p == "" {
			p = PrimMutex
		}
		m[p]++
	}
	return m
}
