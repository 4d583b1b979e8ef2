//go:build lockraft_planted

package lockfsm

import (
	"path/filepath"
	"testing"
)

// TestPlantReachesTheFSM: Options.Plant plants its bugs in the FSM Open builds, and only there. With
// GrantWhileHeld, a second owner's acquire of a held mutex is granted; an FSM opened without it (in the
// same process, at the same time) refuses the same acquire with ErrLocked.
func TestPlantReachesTheFSM(t *testing.T) {
	var opts Options
	opts.NoSync = true // test files only
	opts.Plant(Planted{GrantWhileHeld: true})
	if opts.knobs != (knobs{grantWhileHeld: true}) {
		t.Fatalf("Plant set %+v", opts.knobs)
	}
	second := func(name string, opts Options) Result {
		f := mustOpen(t, filepath.Join(t.TempDir(), name), opts)
		defer func() { _ = f.Close() }()
		cmds := []Command{
			{Kind: KindOpenSession}, {Kind: KindOpenSession},
			{Kind: KindAcquire, Session: 1, Seq: 1, Name: "a", Owner: "h"},
			{Kind: KindAcquire, Session: 2, Seq: 1, Name: "a", Owner: "x"},
		}
		var r Result
		for i := range cmds {
			r, _ = f.ApplyCommand(uint64(i+1), &cmds[i], nil)
		}
		return r
	}
	if r := second("planted.db", opts); r.Status != Granted || r.Err != nil {
		t.Fatalf("planted GrantWhileHeld: second owner got %+v, want Granted", r)
	}
	if r := second("correct.db", Options{NoSync: true}); r.Err != ErrLocked {
		t.Fatalf("correct FSM: second owner got %+v, want ErrLocked", r)
	}
}
