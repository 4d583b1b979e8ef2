//go:build lockraft_planted

package chaos

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/lockraft/lockraft/internal/knobs"
)

// Bugs planted in lockfsm reach it only in builds with the lockraft_planted
// tag: go test -tags lockraft_planted ./chaos/

// Planted in lockfsm: an acquire granted while another owner holds the name.
func TestPlantedGrantWhileHeldCaught(t *testing.T) {
	grantWhileHeldCaught(t, 2*time.Second, nil, 10*time.Second)
}

// The same bug in a fleet with light members (churn-light): their grants,
// forwarded through the leader, are checked as a replica's are.
func TestPlantedGrantWhileHeldCaughtWithLightMembers(t *testing.T) {
	grantWhileHeldCaught(t, 4*time.Second, []string{FaultChurnLight}, 20*time.Second)
}

// grantWhileHeldCaught runs one name under faults with GrantWhileHeld
// planted and fails unless the checks catch it.
func grantWhileHeldCaught(t *testing.T, d time.Duration, faults []string, checkTimeout time.Duration) {
	t.Helper()
	wl := DefaultWorkload()
	wl.Names = []string{"a"}
	rep, err := Run(context.Background(), RunConfig{Seed: seed(t), Duration: d, BaseDir: t.TempDir(), Faults: faults,
		Workload: wl, SkipDurability: true, CheckTimeout: checkTimeout,
		Plant: func(k *knobs.Node) { k.FSM.GrantWhileHeld = true }})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("porcupine=%s live=%d violations: %s", rep.Linearizable, rep.Live, strings.Join(rep.Violations, "; "))
	// Caught means reported as a violation: porcupine finds the history
	// illegal, or (when the doubled grants happen not to conflict with
	// completed operations) the live-overlap check does.
	if len(rep.Violations) == 0 || (rep.Linearizable != porcupine.Illegal && rep.Live == 0) {
		t.Fatalf("grant without the holder check not caught (faults %v): porcupine=%s live=%d", faults, rep.Linearizable, rep.Live)
	}
}

// runPlanted runs prims' workload with lockfsm's planted bug h and returns
// the report.
func runPlanted(t *testing.T, h knobs.FSM, prims ...string) *Report {
	t.Helper()
	wl := catalogueWorkload(prims...)
	wl.MaxHold = 40 * time.Millisecond
	rep, err := Run(context.Background(), RunConfig{Seed: seed(t), Duration: 3 * time.Second, BaseDir: t.TempDir(),
		Workload: wl, SkipDurability: true, CheckTimeout: 20 * time.Second,
		Plant: func(k *knobs.Node) { k.FSM = h }})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("porcupine=%s live=%d accepted=%d ops=%v violations: %s", rep.Linearizable, rep.Live, rep.Accepted,
		rep.OpsByPrim, strings.Join(rep.Violations, "; "))
	return rep
}

// Planted in lockfsm, one per primitive; each must be reported as a
// violation (porcupine finds the history illegal under the primitive's
// model, or the store sees two conflicting live sections).
func TestPlantedCatalogueBugsCaught(t *testing.T) {
	cases := []struct {
		name  string
		hooks knobs.FSM
		prim  string
	}{
		{"reader beside a writer", knobs.FSM{ReaderBesideWriter: true}, PrimRW},
		{"a permit over N", knobs.FSM{PermitOverN: true}, PrimSemaphore},
		{"two leaders with live Contexts", knobs.FSM{GrantWhileHeld: true}, PrimElection},
		{"a multi-name grant that takes only some names", knobs.FSM{PartialMultiGrant: true}, PrimMulti},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := runPlanted(t, c.hooks, c.prim)
			if len(rep.Violations) == 0 || (rep.Linearizable != porcupine.Illegal && rep.Live == 0) {
				t.Fatalf("%s not caught: porcupine=%s live=%d", c.name, rep.Linearizable, rep.Live)
			}
		})
	}
}
