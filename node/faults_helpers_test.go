package node

import (
	"sync"

	"github.com/lockraft/lockraft/internal/faults"
	"github.com/lockraft/lockraft/internal/knobs"
)

// plantedFaults finds the Faults planted in a node's knobs (withFaults).
var plantedFaults sync.Map // *knobs.Node → *faults.Faults

// withFaults gives the node started with c a Faults of its own (a tune
// function: every node of a cluster gets its own); faultsOf finds it.
func withFaults(c *Config) {
	if _, ok := plantedFaults.Load(c.knobs); ok && c.knobs != nil {
		return
	}
	f := &faults.Faults{}
	c.knobs = f.Knobs(c.knobs)
	plantedFaults.Store(c.knobs, f)
}

// faultsOf is the Faults planted in n by withFaults.
func faultsOf(n *Node) *faults.Faults {
	f, ok := plantedFaults.Load(n.k)
	if !ok {
		panic("node started without withFaults")
	}
	return f.(*faults.Faults)
}

// knobsOfConfig returns c's knobs, planting empty ones first if it has none,
// so that a tune function can set a planted bug.
func knobsOfConfig(c *Config) *knobs.Node {
	if c.knobs == nil {
		c.knobs = &knobs.Node{}
	}
	return c.knobs
}
