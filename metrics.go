package lockraft

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockraft/lockraft/node"
)

// WithMetrics registers lockraft's Prometheus metrics on reg: operation
// counters and latency histograms, and a collector that reads the node's
// counters and gauges at scrape time (lock table, sessions, raft, snapshots,
// gossip, light members). Nothing is registered anywhere else. Without this
// option there are no collectors and the lock path does no metrics work
// (one nil check per call).
//
// All names start with lockraft_; labels have bounded values (never a lock
// name or an owner). To run several nodes in one process on one registry,
// give each its own labels with prometheus.WrapRegistererWith. Join fails
// with ErrInvalidConfig if a metric cannot be registered (for example twice
// on the same registry). The metrics are listed in docs/operations.md.
func WithMetrics(reg prometheus.Registerer) Option {
	return func(o *options) { o.ops.metrics = reg }
}

// opsOptions are the options of the operations features (metrics.go).
type opsOptions struct {
	metrics prometheus.Registerer
}

// Primitives, the values of the "primitive" label, by index. Adding a lock
// type is adding its name here.
const (
	primMutex = iota
	primRW
	primSemaphore
	primElection
	primMulti // LockAll / TryLockAll
	primCount
)

var primitives = [primCount]string{"mutex", "rwlock", "semaphore", "election", "multilock"}

// Operation kinds and results, the values of the "kind" and "result" labels.
const (
	opLock = iota
	opTryLock
	opUnlock
	opRenew
	opProclaim // an election leader's Proclaim
	opCount
)

var opNames = [opCount]string{"lock", "trylock", "unlock", "renew", "proclaim"}

var resultNames = []string{"ok", "locked", "not_held", "canceled", "deadline_exceeded", "unavailable",
	"session_expired", "closed", "invalid", "error"}

// resultOf maps an operation's error to its bounded result label.
func resultOf(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrLocked):
		return 1
	case errors.Is(err, ErrNotHeld):
		return 2
	case errors.Is(err, context.Canceled):
		return 3
	case errors.Is(err, context.DeadlineExceeded):
		return 4
	case errors.Is(err, ErrUnavailable):
		return 5
	case errors.Is(err, ErrSessionExpired):
		return 6
	case errors.Is(err, ErrClosed), errors.Is(err, ErrRemoved), errors.Is(err, ErrStorage):
		return 7
	case errors.Is(err, ErrOlderMembers):
		return 5 // the catalogue waits for a rolling upgrade: retry later
	case errors.Is(err, ErrInvalidName), errors.Is(err, ErrInvalidOwner), errors.Is(err, ErrInvalidConfig),
		errors.Is(err, ErrTooManyHolds), errors.Is(err, ErrAlreadyWaiting),
		errors.Is(err, ErrWrongKind), errors.Is(err, ErrHoldConflict), errors.Is(err, ErrUpgrade),
		errors.Is(err, ErrBadPermits), errors.Is(err, ErrPermitsMismatch), errors.Is(err, ErrTooManyNames),
		errors.Is(err, ErrDuplicateName), errors.Is(err, ErrInvalidValue):
		return 8
	}
	return 9
}

// metrics is one node's instrumentation; nil when WithMetrics is absent.
type metrics struct {
	// ops[primitive][kind][result], resolved once so that counting is an
	// atomic add with no label lookup and no allocation.
	ops         [][opCount][]prometheus.Counter
	acquireWait []prometheus.Observer // by primitive
	hooks       node.MetricsHooks
	collectors  []prometheus.Collector
}

func latencyBuckets() []float64 { return prometheus.ExponentialBuckets(0.0005, 2, 18) } // 0.5 ms … 65 s

// newMetrics builds the instrumentation (not yet registered).
func newMetrics() *metrics {
	m := &metrics{}
	opsVec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lockraft_operations_total",
		Help: "Lock operations this node served, by primitive (mutex, rwlock, semaphore, election, multilock), kind (lock, trylock, unlock, renew, proclaim) and result.",
	}, []string{"primitive", "kind", "result"})
	wait := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "lockraft_acquire_wait_seconds",
		Help:    "Successful Lock calls: from the call to the grant in hand (includes queueing).",
		Buckets: latencyBuckets(),
	}, []string{"primitive"})
	for _, p := range primitives {
		var byKind [opCount][]prometheus.Counter
		for k := range opCount {
			for _, r := range resultNames {
				byKind[k] = append(byKind[k], opsVec.WithLabelValues(p, opNames[k], r))
			}
		}
		m.ops = append(m.ops, byKind)
		m.acquireWait = append(m.acquireWait, wait.WithLabelValues(p))
	}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
		m.collectors = append(m.collectors, h)
		return h
	}
	head := hist("lockraft_queue_head_wait_seconds",
		"Lock calls that queued: from reaching the head of the queue to the grant, on this node's apply clock (raft members only).",
		latencyBuckets())
	commit := hist("lockraft_commit_duration_seconds",
		"This node's commands (acquire, release, cancel): from first proposal to the result applied here.",
		latencyBuckets())
	fsync := hist("lockraft_fsync_duration_seconds",
		"Raft log saves (write and fdatasync).", prometheus.ExponentialBuckets(0.0001, 2, 16))
	fwd := hist("lockraft_forward_duration_seconds",
		"Light members: one call carrying queued commands to the leader.", latencyBuckets())
	keepalive := hist("lockraft_keepalive_duration_seconds",
		"This node's acknowledged session keepalives: from the send to the leader's answer.", latencyBuckets())
	m.hooks = node.MetricsHooks{
		QueueHead: func(d time.Duration) { head.Observe(d.Seconds()) },
		Commit:    func(d time.Duration) { commit.Observe(d.Seconds()) },
		Fsync:     func(d time.Duration) { fsync.Observe(d.Seconds()) },
		Forward:   func(d time.Duration) { fwd.Observe(d.Seconds()) },
		Keepalive: func(d time.Duration) { keepalive.Observe(d.Seconds()) },
	}
	m.collectors = append(m.collectors, opsVec, wait)
	return m
}

// register adds every collector, the node's included, to reg; on failure
// it unregisters what it added.
func (m *metrics) register(reg prometheus.Registerer, n *node.Node) error {
	all := append(m.collectors, &nodeCollector{n: n})
	for i, c := range all {
		if err := reg.Register(c); err != nil {
			for _, done := range all[:i] {
				reg.Unregister(done)
			}
			return fmt.Errorf("%w: WithMetrics: %v", ErrInvalidConfig, err)
		}
	}
	return nil
}

// observe counts one operation (and a successful Lock's wait). A nil m
// counts nothing.
func (m *metrics) observe(prim, kind int, start time.Time, err error) {
	if m == nil {
		return
	}
	m.ops[prim][kind][resultOf(err)].Inc()
	if kind == opLock && err == nil {
		m.acquireWait[prim].Observe(time.Since(start).Seconds())
	}
}
