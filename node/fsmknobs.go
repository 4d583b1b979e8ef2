//go:build !lockraft_planted

package node

import (
	"github.com/lockraft/lockraft/internal/knobs"
	"github.com/lockraft/lockraft/lockfsm"
)

// fsmKnobsBuilt: without the lockraft_planted tag lockfsm cannot be given
// planted bugs (checkKnobs refuses them).
const fsmKnobsBuilt = false

func fsmOptions(knobs.FSM) lockfsm.Options { return lockfsm.Options{} }
