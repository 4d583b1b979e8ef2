package node

import "github.com/lockraft/lockraft/internal/knobs"

// knobsOfConfig returns c's knobs, planting empty ones first if it has none,
// so that a tune function can set a planted bug.
func knobsOfConfig(c *Config) *knobs.Node {
	if c.knobs == nil {
		c.knobs = &knobs.Node{}
	}
	return c.knobs
}
