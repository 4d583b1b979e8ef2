//go:build lockraft_planted

package node

import (
	"github.com/lockraft/lockraft/internal/knobs"
	"github.com/lockraft/lockraft/lockfsm"
)

const fsmKnobsBuilt = true

// fsmOptions plants the knobs' lock-table bugs in lockfsm.
func fsmOptions(k knobs.FSM) lockfsm.Options {
	var o lockfsm.Options
	o.Plant(lockfsm.Planted{GrantWhileHeld: k.GrantWhileHeld, ReaderBesideWriter: k.ReaderBesideWriter,
		PermitOverN: k.PermitOverN, PartialMultiGrant: k.PartialMultiGrant})
	return o
}
