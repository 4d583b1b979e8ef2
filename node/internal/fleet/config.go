package fleet

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lockraft/lockraft/membership"
)

// CheckGossip reports the first problem with a node's gossip configuration:
// the formation fields (this package's rules) and then the member's own
// settings (membership.Config.ValidateSettings). The node wraps the error
// in its ErrInvalidConfig; the messages name the fields as the node's
// configuration does (Gossip.Founders).
func CheckGossip(g *membership.Config) error {
	if g.BootstrapExpect < 0 {
		return fmt.Errorf("Gossip.BootstrapExpect %d is negative", g.BootstrapExpect)
	}
	if len(g.Name) > 256 {
		return errors.New("Gossip.Name is longer than 256 bytes")
	}
	switch {
	case len(g.Founders) == 0 && g.BootstrapExpect == 1:
		// The development mode: this member founds alone.
	case len(g.Founders) == 0:
		return errors.New("Gossip.Founders is required: name the members (gossip names, the same list on every member) " +
			"that form the cluster together; BootstrapExpect 1 without Founders is the single-node development mode")
	case g.BootstrapExpect != 0 && g.BootstrapExpect != len(g.Founders):
		return fmt.Errorf("Gossip.BootstrapExpect is %d but %d Founders are named", g.BootstrapExpect, len(g.Founders))
	}
	seen := map[string]bool{}
	for _, f := range g.Founders {
		if f == "" || len(f) > 256 {
			return errors.New("Gossip.Founders: a name is empty or longer than 256 bytes")
		}
		if seen[f] {
			return fmt.Errorf("Gossip.Founders: %q is listed twice", f)
		}
		seen[f] = true
	}
	return g.ValidateSettings()
}

// WithDefaults fills in the defaults a node's gossip takes: bound to
// 127.0.0.1, BootstrapExpect len(Founders), LAN timing, SettleFor 3 probe
// intervals, ReconcileEvery 1 s.
func WithDefaults(g membership.Config) membership.Config {
	if g.BindAddr == "" {
		g.BindAddr = "127.0.0.1"
	}
	if g.BootstrapExpect == 0 {
		g.BootstrapExpect = len(g.Founders)
	}
	if g.Timing == (membership.Timing{}) {
		g.Timing = membership.LANTiming()
	}
	if g.SettleFor == 0 {
		g.SettleFor = 3 * g.Timing.ProbeInterval
	}
	if g.ReconcileEvery == 0 {
		g.ReconcileEvery = time.Second
	}
	return g
}

// gossipName is the member's gossip name: the configured one, else
// "lockraft-" and its raft id in 16 hex digits (membership's default too).
func gossipName(g *membership.Config, id uint64) string {
	if g.Name != "" {
		return g.Name
	}
	return fmt.Sprintf("lockraft-%016x", id)
}

// founders is the resolved founders list, sorted: Founders, or this member
// alone in the development mode.
func founders(g *membership.Config, self string) []string {
	f := slices.Clone(g.Founders)
	if len(f) == 0 && g.BootstrapExpect == 1 {
		f = []string{self}
	}
	slices.Sort(f)
	return f
}
