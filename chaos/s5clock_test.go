package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/lockraft/lockraft/internal/knobs"
)

// TestS5WallStepDoesNotKeepHolderLive (S5, review finding 2): a holder whose
// wall clock steps (back or forward, by any amount) and which is then cut off
// from the leader while a waiter on the majority side takes its lock over
// must have been told before the waiter enters: the fencing store sees no
// live overlap. The same for a wall step on the leader. Deadlines kept on
// the wall clock (UnixNano rebuilt with time.Unix) keep a holder whose wall
// clock stepped back live after the takeover.
func TestS5WallStepDoesNotKeepHolderLive(t *testing.T) {
	cases := []struct {
		name   string
		leader bool // step the leader's wall clock, not the holder's
		step   time.Duration
	}{
		{"holder-back-60s", false, -60 * time.Second},
		{"holder-back-24h", false, -24 * time.Hour},
		{"holder-forward-60s", false, 60 * time.Second},
		{"leader-back-60s", true, -60 * time.Second},
		{"leader-forward-60s", true, 60 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			live, cause := wallStepTakeover(t, tc.leader, tc.step, nil)
			if live > 0 {
				t.Fatalf("S5: %d live overlap(s): the cut-off holder's hold was still live (cause %v) when the waiter entered", live, cause)
			}
		})
	}
}

// wallStepTakeover runs the scenario once: a follower holds "x" (a live
// critical section in a fencing store), its wall clock (or the leader's)
// steps by step, the holder is isolated, a waiter on the other follower is
// granted "x" and enters. It returns the store's live overlaps and the
// holder's Context cause at that moment.
func wallStepTakeover(t *testing.T, onLeader bool, step time.Duration, plant func(*knobs.Node)) (int64, error) {
	c, ctx, lead, fol := threeNodes(t, plant)
	holder, waiter := fol[0], fol[1]
	store := NewFencedStore()
	h, err := c.Node(holder).Acquire(ctx, "x", "a", true, 0)
	if err != nil {
		t.Fatal(err)
	}
	sec := store.EnterSection(&Section{Name: "x", Owner: "a", Token: h.Token(), Node: holder, Ctx: h.Context(),
		Live: func() bool { return h.Context().Err() == nil }})
	defer store.Exit(sec)
	store.Write(sec)
	stepped := holder
	if onLeader {
		stepped = lead
	}
	c.WallStep(stepped, step)
	c.Isolate(holder)
	start := time.Now()
	h2, err := c.Node(waiter).Acquire(ctx, "x", "b", true, 0)
	if err != nil {
		t.Fatalf("the waiter was not granted x: %v", err)
	}
	cause := context.Cause(h.Context())
	sec2 := store.EnterSection(&Section{Name: "x", Owner: "b", Token: h2.Token(), Node: waiter,
		Live: func() bool { return h2.Context().Err() == nil }})
	store.Write(sec2)
	if store.Write(sec) {
		t.Fatalf("fencing: the old holder's write (token %d) was accepted after token %d", h.Token(), h2.Token())
	}
	store.Exit(sec2)
	_, _, accepted, live := store.Counts()
	t.Logf("wall step %v on n%d (%s); holder n%d isolated; waiter granted token %d after %v; holder's cause then: %v; live overlaps %d",
		step, stepped, map[bool]string{true: "leader", false: "holder"}[onLeader], holder, h2.Token(),
		time.Since(start).Round(time.Millisecond), cause, live)
	if accepted > 0 {
		t.Fatalf("fencing: %d accepted overlaps", accepted)
	}
	return live, cause
}
