package lease

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/lockfsm"
)

// dueByScan is what the leader's tick expired before the timer queue: every
// lease and delay whose time has passed and whose expiry was not proposed
// within RetryInterval, found by a pass over all of them, in the fixed
// order. It changes nothing.
func dueByScan(l *duties, e *Engine, now time.Time) (leases, delays []string) {
	ready := func(d *deadline) bool {
		return !now.Before(d.at) && (d.proposedAt.IsZero() || now.Sub(d.proposedAt) >= e.cfg.RetryInterval)
	}
	for _, k := range slices.SortedFunc(maps.Keys(l.leases), compareLeaseKeys) {
		for _, d := range l.leases[k] {
			if ready(d) {
				leases = append(leases, fmt.Sprintf("%s/%d/%d/%s", k.name, k.token, d.session, d.owner))
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(l.delays)) {
		if ready(l.delays[name]) {
			delays = append(delays, fmt.Sprintf("%s/%d", name, l.delays[name].token))
		}
	}
	return leases, delays
}

// nextLookByScan is the earliest time a lease or delay needs the leader: its
// time, or RetryInterval after its proposed expiry.
func nextLookByScan(l *duties, e *Engine) (time.Time, bool) {
	var first time.Time
	found := false
	look := func(d *deadline) {
		at := later(d.at, d.proposedAt.Add(e.cfg.RetryInterval))
		if d.proposedAt.IsZero() {
			at = d.at
		}
		if !found || at.Before(first) {
			first, found = at, true
		}
	}
	for _, ds := range l.leases {
		for _, d := range ds {
			look(d)
		}
	}
	for _, d := range l.delays {
		look(d)
	}
	return first, found
}

// TestTimerQueueMatchesScan (L3: a lease or lock-delay ends when it is due,
// not later): over random grants, renewals, releases, delays and lifts, with
// the clock moving in steps shorter and longer than the leases, the leader's
// tick expires exactly what a pass over every deadline finds due, in the
// same order, and DeadlineBefore agrees with that pass on the next deadline.
func TestTimerQueueMatchesScan(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	f, err := lockfsm.Open(t.TempDir()+"/t.db", lockfsm.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	now := t0
	e := New(Config{Self: 1, KeepaliveInterval: 2500 * time.Millisecond, RetryInterval: 300 * time.Millisecond,
		ElectionTimeout: time.Second, TickInterval: 100 * time.Millisecond}, &scriptHost{fsm: f}, now)
	e.BecomeLeader(2, &raftpb.ConfState{Voters: []uint64{1}})
	e.Ready(now)
	l := &e.lead
	type hold struct {
		name           string
		token, session uint64
		owner          string
	}
	var holds []hold
	token := uint64(10)
	expired, lifted := 0, 0
	for step := range 20_000 {
		switch r := rng.IntN(10); {
		case r < 3: // a grant, with a lease; some share their token
			token++
			h := hold{name: fmt.Sprintf("n%d", rng.IntN(30)), token: token, session: uint64(1 + rng.IntN(3)),
				owner: fmt.Sprintf("o%d", rng.IntN(2))}
			n := 1 + rng.IntN(2)
			for range n {
				l.onEvent(&lockfsm.Event{Kind: lockfsm.EventGranted, Name: h.name, Token: h.token, Session: h.session,
					Owner: h.owner, LeaseMillis: uint64(50 + rng.IntN(1500)), Permits: uint32(n - 1)}, now)
				holds = append(holds, h)
				h.owner += "+"
			}
		case r < 5 && len(holds) > 0: // a renewal
			h := holds[rng.IntN(len(holds))]
			e.Renew(h.name, h.token, h.session, h.owner, now.Add(-time.Duration(rng.IntN(50))*time.Millisecond))
		case r < 6 && len(holds) > 0: // a release
			i := rng.IntN(len(holds))
			h := holds[i]
			l.onEvent(&lockfsm.Event{Kind: lockfsm.EventReleased, Name: h.name, Token: h.token, Session: h.session,
				Owner: h.owner}, now)
			holds = slices.Delete(holds, i, i+1)
		case r < 7: // a lock-delay, or its end by a grant
			name := fmt.Sprintf("n%d", rng.IntN(30))
			if rng.IntN(3) == 0 {
				l.onEvent(&lockfsm.Event{Kind: lockfsm.EventGranted, Name: "x", ExtraNames: []string{name}}, now)
			} else {
				token++
				l.onEvent(&lockfsm.Event{Kind: lockfsm.EventDelayed, Name: name, Token: token,
					DelayMillis: uint64(rng.IntN(800))}, now)
			}
		default: // time passes, and the leader ticks
			now = now.Add(time.Duration(rng.IntN(120)) * time.Millisecond)
			if want, ok := nextLookByScan(l, e); ok != e.DeadlineBefore(want.Add(time.Nanosecond)) ||
				(ok && e.DeadlineBefore(want)) {
				t.Fatalf("step %d: DeadlineBefore disagrees with the scan's next deadline %v (found %v)", step, want.Sub(t0), ok)
			}
			wantLeases, wantDelays := dueByScan(l, e, now)
			var gotLeases, gotDelays, liftNames []string
			var expiredHolds []int
			for _, c := range e.Tick(now) {
				switch c.Kind {
				case lockfsm.KindExpireLease:
					// The expiry names the holder only when it may share its
					// token; find the holder it means.
					i := slices.IndexFunc(holds, func(h hold) bool {
						return h.name == c.Name && h.token == c.Token && (c.Session == 0 || h.session == c.Session && h.owner == c.Owner)
					})
					if i < 0 {
						t.Fatalf("step %d: expiry of %s/%d, which holds no lease", step, c.Name, c.Token)
					}
					h := holds[i]
					gotLeases = append(gotLeases, fmt.Sprintf("%s/%d/%d/%s", h.name, h.token, h.session, h.owner))
					expiredHolds = append(expiredHolds, i)
				case lockfsm.KindLiftDelay:
					gotDelays = append(gotDelays, fmt.Sprintf("%s/%d", c.Name, c.Token))
					liftNames = append(liftNames, c.Name)
				}
			}
			if !slices.Equal(wantLeases, gotLeases) || !slices.Equal(wantDelays, gotDelays) {
				t.Fatalf("step %d at %v: tick expired leases %v and lifted %v; due by a scan: %v and %v",
					step, now.Sub(t0), gotLeases, gotDelays, wantLeases, wantDelays)
			}
			expired += len(gotLeases)
			lifted += len(gotDelays)
			// Half the expiries and lifts are applied (the hold goes, the
			// delay ends); the others are retried after RetryInterval.
			slices.Sort(expiredHolds)
			for j := len(expiredHolds) - 1; j >= 0; j-- {
				if i := expiredHolds[j]; rng.IntN(2) == 0 {
					h := holds[i]
					l.onEvent(&lockfsm.Event{Kind: lockfsm.EventReleased, Name: h.name, Token: h.token,
						Session: h.session, Owner: h.owner}, now)
					holds = slices.Delete(holds, i, i+1)
				}
			}
			for i, name := range liftNames {
				if rng.IntN(2) == 0 {
					var tok uint64
					fmt.Sscanf(gotDelays[i][len(name)+1:], "%d", &tok)
					e.OnLiftDelay(&lockfsm.Command{Kind: lockfsm.KindLiftDelay, Name: name, Token: tok}) // applied
				}
			}
		}
	}
	if expired < 100 || lifted < 100 {
		t.Fatalf("only %d lease expiries and %d lifts compared: the test exercises too little", expired, lifted)
	}
	t.Logf("%d lease expiries and %d lifts compared", expired, lifted)
}
