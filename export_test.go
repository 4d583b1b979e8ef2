package lockraft

import "github.com/lockraft/lockraft/node"

// WithNodeConfig adjusts the full node configuration: for this package's
// tests only (fault injection, test clocks). Services use WithTuning.
func WithNodeConfig(f func(*node.Config)) Option { return func(o *options) { f(&o.cfg) } }

// Combine applies opts in order as one Option (tests' presets).
func Combine(opts ...Option) Option {
	return func(o *options) {
		for _, opt := range opts {
			opt(o)
		}
	}
}
