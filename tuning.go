package lockraft

import "time"

// Tuning holds advanced knobs most services never set (WithTuning). Zero
// fields keep their defaults; Join validates the result (ErrInvalidConfig
// names the field out of range).
type Tuning struct {
	// HeartbeatTicks: the leader's heartbeat period in raft ticks (default
	// 2, i.e. 200 ms and five per election timeout with the default
	// timings; 1 when the election timeout is under 10 ticks). Must be
	// below the election timeout in ticks (WithTimings). Every heartbeat
	// wakes every follower: fewer cost less idle CPU, and give a follower
	// fewer chances to hear its leader before it campaigns.
	HeartbeatTicks int
	// KeepaliveInterval: how often the node renews its session (default
	// session TTL / 4, or shorter, down to TTL / 10, where a quarter would
	// leave a session less than two back-to-back failovers; at most TTL / 3).
	KeepaliveInterval time.Duration
	// DriftRatio bounds how far two nodes' clock rates may differ (default
	// 0.02): a holder gives its locks up 2×DriftRatio×TTL + one tick before
	// the leader could expire them. At most 0.25.
	DriftRatio float64
	// RetryInterval: a proposal not applied after this long is proposed
	// again, idempotently (default 5 ticks).
	RetryInterval time.Duration
	// SnapshotEvery: snapshot the lock table and compact the raft log every
	// this many applied entries (default 10,000), keeping CompactKeep
	// (default 5,000) for slow followers. A table of more records (sessions
	// and names) than that is snapshotted every as many entries as it has
	// records, up to ten times SnapshotEvery, so a snapshot's cost is spread
	// over more entries while the log kept in memory stays bounded.
	SnapshotEvery uint64
	CompactKeep   uint64
	// CommitInterval: the lock table is written to its bbolt file at most
	// this often (default 100 ms); the raft log is the durability source.
	CommitInterval time.Duration
	// SessionEndRun: a session that ends (closed, or expired) holding or
	// waiting for more names than this ends over several raft entries of
	// at most this many names each (default 512, about 1 ms of apply),
	// so that no one entry holds every member for long. Its names are
	// released run by run, in name order; its waiters are never granted.
	// Used once every member runs 0.3 or later.
	SessionEndRun int
	// LogEngine: "wal" (the default for a new directory) or "bbolt"; empty
	// keeps the engine of existing data.
	LogEngine string
	// MaxSnapshotSize bounds a snapshot received from the leader (default
	// 1 GiB).
	MaxSnapshotSize int64
	// TryLockTimeout: how long a TryLock (and the other Try calls) waits for
	// an answer before it returns ErrUnavailable (default two election
	// timeouts): a cluster without a leader answers nothing.
	TryLockTimeout time.Duration
}

// WithTuning sets advanced knobs (see Tuning). Zero fields keep defaults.
func WithTuning(t Tuning) Option {
	return func(o *options) {
		c := &o.cfg
		set := func(dst *time.Duration, v time.Duration) {
			if v != 0 {
				*dst = v
			}
		}
		if t.HeartbeatTicks != 0 {
			c.HeartbeatTicks = t.HeartbeatTicks
		}
		set(&c.KeepaliveInterval, t.KeepaliveInterval)
		set(&c.RetryInterval, t.RetryInterval)
		set(&c.CommitInterval, t.CommitInterval)
		set(&c.TryLockTimeout, t.TryLockTimeout)
		if t.DriftRatio != 0 {
			c.DriftRatio = t.DriftRatio
		}
		if t.SnapshotEvery != 0 {
			c.SnapshotEvery = t.SnapshotEvery
		}
		if t.CompactKeep != 0 {
			c.CompactKeep = t.CompactKeep
		}
		if t.LogEngine != "" {
			c.LogEngine = t.LogEngine
		}
		if t.MaxSnapshotSize != 0 {
			c.MaxSnapshotSize = t.MaxSnapshotSize
		}
		if t.SessionEndRun != 0 {
			c.SessionEndRun = t.SessionEndRun
		}
	}
}
