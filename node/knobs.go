package node

import (
	"fmt"

	"github.com/lockraft/lockraft/internal/knobs"
	"github.com/lockraft/lockraft/internal/lockerr"
)

// A node's testing knobs (internal/knobs.Node) sit in an unexported field of
// its Config; the node holds them as n.k, never nil, and reads them only
// through that struct (its methods do what production does when a knob is
// unset).

// Tests outside this package plant knobs in a Config with knobs.Plant.
func init() {
	knobs.Install(func(cfg any, k *knobs.Node) { cfg.(*Config).knobs = k })
}

// noKnobs is what a node without knobs reads: the production behaviour.
var noKnobs = &knobs.Node{}

// knobsOf returns cfg's knobs, never nil.
func knobsOf(cfg *Config) *knobs.Node {
	if cfg.knobs == nil {
		return noKnobs
	}
	return cfg.knobs
}

// checkKnobs refuses knobs this build cannot honour.
func checkKnobs(k *knobs.Node) error {
	if k.FSM.Any() && !fsmKnobsBuilt {
		return fmt.Errorf("%w: planted lock-table bugs need a build with -tags lockraft_planted", lockerr.ErrInvalidConfig)
	}
	return nil
}
