// Package lockraft gives a fleet of service replicas distributed locks with
// nothing extra to operate. Each replica embeds a Raft node; lock grants,
// session ownership and fair wait queues are Raft log entries applied to a
// bbolt-backed state machine on every replica.
//
//	node, err := lockraft.Join(peers, lockraft.WithDataDir("/var/lib/orders/lockraft"),
//		lockraft.WithListenAddr("10.0.0.1:7400"), lockraft.WithClusterID("orders-prod"),
//		lockraft.WithTLSFiles("ca.pem", "member-1.pem", "member-1-key.pem")) // see security.go
//	defer node.Close(context.Background())
//	l, err := node.Lock(ctx, "stock/sku-42") // blocks, FIFO-fair, no polling
//	defer l.Unlock(ctx)
//	doWork(l.Context(), l.Token())           // Context ends if the lock is lost; Token fences
//
// Promises (docs/promises.md): at most one owner holds a name at any log index;
// tokens strictly increase per name; an acknowledged Lock or Unlock survives
// the loss of a minority and a full-cluster restart; a Lock that fails leaves
// nothing behind; a holder's Context ends before the cluster could grant the
// lock to someone else by expiry; waiters are granted in enqueue order.
//
// The inspection views (LockView, LocksPage, MembersView and the types they
// hold) and MemberID are declared in an internal package and named here by
// type aliases; go doc prints their fields with
//
//	go doc -all github.com/lockraft/lockraft/internal/views
package lockraft

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/node"
)

// Errors. Compare with errors.Is; each is one value whichever package
// returned it. Each error's comment (here and beside the calls it belongs
// to: catalogue.go, election.go, ...) says what happened, its "Outcome:"
// (whether the call left something behind, or may still take effect), and
// "Retryable: yes" or "Retryable: no": exactly what IsRetryable reports for
// it. That is the one place retryability is decided (TestErrorDocs holds
// every exported error to it).
var (
	// ErrLocked: TryLock (or another call that does not wait) found the
	// name held by another owner, waiters ahead of it, no permits free, or
	// the name in its lock-delay; the message names the holder when there
	// is one. Outcome: known, nothing is held or queued. Retryable: yes,
	// later.
	ErrLocked = lockerr.ErrLocked
	// ErrNotHeld: Unlock, Renew (or Release, Resign, Proclaim) of a lock
	// this handle no longer holds (unlocked already, released by its
	// lease's or its session's expiry; the error then also wraps the
	// cause). Outcome: known, nothing changed. Retryable: no, the lock is
	// gone; IsRetryable is false for any error that wraps it.
	ErrNotHeld = lockerr.ErrNotHeld
	// ErrClosed: the node is closed or closing. A Lock that returns it
	// leaves nothing behind once the node's session is closed or expires.
	// Outcome: known. Retryable: no, not on this node.
	ErrClosed = lockerr.ErrClosed
	// ErrInvalidName: the lock name is empty, longer than 512 bytes, or not
	// valid UTF-8. Outcome: known, nothing was proposed. Retryable: no, fix
	// the name.
	ErrInvalidName = lockerr.ErrInvalidName
	// ErrInvalidOwner: the owner (WithOwner) is empty, longer than 256
	// bytes, or not valid UTF-8. Outcome: known, nothing was proposed.
	// Retryable: no, fix the owner.
	ErrInvalidOwner = lockerr.ErrInvalidOwner
	// ErrInvalidConfig: an option or argument is out of range (a Join
	// option, a negative lease, a page limit, a malformed member id); the
	// message names it. Outcome: known, nothing was proposed. Retryable:
	// no, fix the call.
	ErrInvalidConfig = lockerr.ErrInvalidConfig
	// ErrInvalidLease: a lease (WithLease) shorter than the cluster's
	// timings can hand out and keep renewed; the message names the floor
	// (see WithLease; 600 ms with the default timings). Outcome: known,
	// nothing was proposed. Retryable: no, ask for a longer lease.
	ErrInvalidLease = lockerr.ErrInvalidLease
	// ErrTooManyHolds: a reentrant Lock past the hold limit
	// (WithMaxHolds). Outcome: known, nothing changed; the existing holds
	// remain. Retryable: no, not before an Unlock.
	ErrTooManyHolds = lockerr.ErrTooManyHolds
	// ErrAlreadyWaiting: the same explicit owner is already waiting for
	// this name (two concurrent Locks with one WithOwner). Outcome: known,
	// nothing changed. Retryable: no, the owner's other Lock is waiting.
	ErrAlreadyWaiting = lockerr.ErrAlreadyWaiting
	// ErrReleased is a handle's Context cause after its Unlock released
	// the last hold; no call returns it alone. Outcome: known, the lock
	// was released. Retryable: no, there is nothing to retry.
	ErrReleased = lockerr.ErrReleased
	// ErrLeaseExpired is a handle's Context cause when its own lease
	// (WithLease) ran out; the cluster may grant the lock to another owner.
	// A leased Lock whose grant could not be confirmed in time also returns
	// it, wrapping why (ErrUnavailable when no leader answered, which makes
	// it retryable). Outcome: known, nothing is held. Retryable: no, not by
	// itself: renew sooner, or use a longer lease.
	ErrLeaseExpired = lockerr.ErrLeaseExpired
	// ErrSessionExpired: the node's session expired or could not be kept
	// alive (see WithSessionTTL); the cluster may grant its locks to other
	// owners.
	//   - A waiting Lock's (or TryLock's) error: nothing is held or queued
	//     for it. The node opens a new session, and calling again waits for
	//     it (bounded by its context). If the session lapsed because this
	//     node had no leader, the error wraps ErrUnavailable too.
	//   - A handle's Context cause: the lock is lost.
	//   - Unlock's error: the session ended while the release was on its
	//     way (or before: the error then also wraps ErrNotHeld, and is not
	//     retryable). The lock goes with the session, at once if the node
	//     closed it, else at the cluster's expiry; calling Unlock again
	//     only reports ErrNotHeld.
	//
	// Outcome: known, this node holds nothing of that session. Retryable:
	// yes: a user's retry loop around Lock is what should happen next, as
	// the Locker adapter does.
	ErrSessionExpired = lockerr.ErrSessionExpired
	// ErrUnavailable: no working leader could be reached in time (a majority
	// of voters unreachable). From TryLock (after two election timeouts),
	// from a Lock or Ready whose ctx ended without a leader (wrapping ctx's
	// cause), or a Lock pending when the session lapsed in the outage
	// (wrapping ErrSessionExpired): nothing held or queued. From Unlock: the
	// node keeps retrying the release. From Close: the session could not be
	// closed; its locks are released by session expiry. From an operator
	// action: it may still happen. Outcome: known for Lock, TryLock and
	// Ready; unknown for Unlock, Resign and the operator actions.
	// Retryable: yes, later.
	ErrUnavailable = lockerr.ErrUnavailable
	// ErrStorage: a disk write failed. The node stopped serving rather than
	// acknowledge anything it could not make durable. Outcome: the failed
	// write was not acknowledged; the node's locks expire with its session.
	// Retryable: no, restart the node once the disk is fixed.
	ErrStorage = lockerr.ErrStorage
	// ErrRemoved: the cluster removed this member from its configuration
	// while it was away (for example down past the dead-member threshold);
	// it stopped serving and holds nothing. Outcome: known. Retryable: no,
	// restart it with a fresh data directory to rejoin as a new member.
	ErrRemoved = lockerr.ErrRemoved
	// ErrDataDir: the data directory is corrupt, locked by another process,
	// or belongs to another node or cluster; the message says which.
	// Outcome: known, Join started nothing. Retryable: no, fix the
	// directory.
	ErrDataDir = lockerr.ErrDataDir
	// ErrNewerVersion: the log holds an entry from a newer lockraft version.
	// This member stopped applying there (nothing past it was applied:
	// skipping it would make its lock table differ from the other
	// replicas') and stopped serving. Outcome: known. Retryable: no,
	// upgrade it and restart it on the same data directory.
	ErrNewerVersion = lockerr.ErrNewerVersion
	// ErrInternal: the node hit a broken invariant and stopped serving
	// rather than go on with state it cannot trust; its session expires and
	// its locks move on. A bug: the message says what happened; report it.
	// Outcome: known, the node holds nothing. Retryable: no, restart the
	// node.
	ErrInternal = lockerr.ErrInternal
)

// IsRetryable reports whether the call that returned err is worth making
// again as is, with nothing to fix first: err is (or wraps) ErrLocked (the
// name was taken), ErrUnavailable (no leader in time), ErrSessionExpired
// (the node's session ended; the next call waits for a new one) or
// ErrObserveLagged (observe again), and does not wrap ErrNotHeld (the
// handle's lock is gone: Unlock or Renew again would only say so). Each
// error's comment says the same ("Retryable: yes/no"). A call that ended
// with its ctx is not retryable by this test: Lock then left nothing
// behind, Unlock's outcome is unknown (the node keeps retrying the
// release).
func IsRetryable(err error) bool {
	if errors.Is(err, ErrNotHeld) {
		return false
	}
	return errors.Is(err, ErrLocked) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrSessionExpired) ||
		errors.Is(err, ErrObserveLagged)
}

// Node is one lockraft replica embedded in the service. Its methods are safe
// for concurrent use.
type Node struct {
	n       *node.Node
	ownerID atomic.Uint64
	// ownerPrefix starts every owner this node makes for a call
	// (newOwner): "node-<id>/call-".
	ownerPrefix string
	m           *metrics // nil without WithMetrics (metrics.go)
}

// Join starts this replica and returns once it is serving; the first Lock
// waits (bounded by its context) until the cluster has a leader and this
// node's session is open.
//
// With WithGossip, peers are gossip seeds ("host:port" of any other
// members; none for the first): the fleet finds itself, the named founders
// form the cluster once they all see each other (never two clusters, see
// Gossip.Founders), and the leader adds, promotes and replaces
// voters by itself. The raft id is random, made on first start and kept in
// the data directory. Join then blocks up to one gossip probe interval (1 s
// with LANGossipTiming; none above 2 s) so that gossip probes on the
// fleet's common phase: an idle member's probes, keepalive and ticks share
// their wake-ups (docs/operations-cost.md).
//
// Without it, peers is the static list of every founding member's gRPC
// address, identical and in the same order on every replica; this replica
// finds itself by WithListenAddr and takes the raft id of its position
// (1-based). A data directory (WithDataDir) is required; a restart with an
// existing directory never re-bootstraps.
func Join(peers []string, opts ...Option) (*Node, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	cfg := o.cfg
	if err := o.security(&cfg); err != nil {
		return nil, err
	}
	if o.gossip != nil {
		if len(o.members) > 0 {
			return nil, fmt.Errorf("%w: WithGossip and WithStaticMembers are mutually exclusive", ErrInvalidConfig)
		}
		g := *o.gossip
		g.Seeds = append(slices.Clone(g.Seeds), peers...)
		cfg.Gossip = &g
	} else if len(o.members) == 0 {
		self, selfOpt := cfg.ListenAddr, "listen address (WithListenAddr)"
		if a := cfg.AdvertiseAddr; a != "" {
			self, selfOpt = a, "advertise address (WithAdvertiseAddr)"
			if _, _, err := net.SplitHostPort(a); err != nil {
				// A bare host keeps the listening port.
				if _, port, err := net.SplitHostPort(cfg.ListenAddr); err == nil {
					self = net.JoinHostPort(a, port)
				}
			}
		}
		for i, p := range peers {
			id := uint64(i + 1)
			cfg.Members = append(cfg.Members, node.Member{ID: id, Addr: p})
			if p == self {
				cfg.ID = id
			}
		}
		if cfg.ID == 0 && len(peers) > 0 {
			// The other options first: a wildcard bind without an
			// advertise address is why no peer matches, and its message
			// says what to do.
			probe := cfg
			probe.ID = cfg.Members[0].ID
			if err := probe.Validate(); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %s %q is not among peers %v", ErrInvalidConfig, selfOpt, self, peers)
		}
	} else {
		cfg.Members = o.members
	}
	var m *metrics
	if o.ops.metrics != nil {
		m = newMetrics()
		cfg.Metrics = &m.hooks
	}
	n, err := node.Start(cfg)
	if err != nil {
		return nil, err
	}
	if m != nil {
		if err := m.register(o.ops.metrics, n); err != nil {
			n.Crash()
			return nil, err
		}
	}
	return &Node{n: n, m: m, ownerPrefix: fmt.Sprintf("node-%016x/call-", n.ID())}, nil
}

// Lock blocks until the named lock is granted to this call, in FIFO order
// of requests across the cluster, or until ctx is done. It returns a handle
// whose Context ends when the lock is lost. Without WithOwner every call is
// its own owner, so a second Lock of the same name waits like anyone else;
// with WithOwner, the same owner re-entering gets the same token and a
// higher hold count. If Lock returns an error, nothing is held or queued
// for it (within one commit). A Lock waiting when the node's session ends
// returns ErrSessionExpired (retry: the node opens a new session); if it
// ended because this node has no leader, the error wraps ErrUnavailable
// too. If ctx ends while this node has no leader, the error wraps both
// ErrUnavailable and ctx's cause (errors.Is holds for both).
func (n *Node) Lock(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	return n.acquire(ctx, name, true, opts)
}

// TryLock takes the lock only if it is free (or already held by the same
// owner); otherwise it returns ErrLocked at once. It never queues. It
// returns within two election timeouts (2 s with the default timings, or
// ctx's deadline if sooner): ErrUnavailable if no leader answered by then
// (also when this node's session lapsed meanwhile), with nothing held or
// queued. Right after Join, call Ready first.
func (n *Node) TryLock(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	return n.acquire(ctx, name, false, opts)
}

func (n *Node) acquire(ctx context.Context, name string, wait bool, opts []LockOption) (*Lock, error) {
	h, err := n.acquireWith(ctx, primMutex, node.Request{Name: name, Wait: wait}, opts)
	if err != nil {
		return nil, err
	}
	return &Lock{h: h, m: n.m, prim: primMutex}, nil
}

// Close stops this replica for now (a restart, a rolling upgrade): it
// releases every lock it holds and removes its waiters (one log entry; a
// replica holding more than Tuning.SessionEndRun names, 512, releases the
// first of them in that entry and the cluster the rest in the entries after
// it, in name order, whether or not this replica is still up), hands
// leadership to another member if it leads, and stops. It keeps its place
// in the cluster and its data directory: Join on the same directory brings it
// back as itself. Use Leave for a replica that goes away for good.
//
// ctx bounds the whole call. If the cluster cannot commit the release (no
// quorum, within two election timeouts) or ctx ends first, Close stops
// anyway and returns an error wrapping ErrUnavailable (or ctx's cause): the
// locks are then released by session expiry, the TTL after the last
// keepalive. Idempotent.
func (n *Node) Close(ctx context.Context) error { return n.n.Close(ctx) }

// Leave is Close for a replica that goes away for good: after releasing its
// locks and handing over leadership it has the cluster remove it from the
// raft configuration (and, with gossip, from the fleet), then stops. Do not
// Join on its data directory again. Without Leave, a gossip fleet replaces a
// voter that stays down only after its dead-voter threshold. Errors as for
// Close; the replica stops either way.
func (n *Node) Leave(ctx context.Context) error { return n.n.Leave(ctx) }

// Ready blocks until this replica can serve: it knows a leader and its
// session is open. Join returns before that; a service can call Ready before
// reporting itself ready (a readiness probe). If ctx ends first it returns
// ctx's cause, wrapping ErrUnavailable while there is no leader (a majority
// of voters unreachable); ErrClosed after Close.
func (n *Node) Ready(ctx context.Context) error { return n.n.Ready(ctx) }

// Addr is the address this node serves gRPC on.
func (n *Node) Addr() string { return n.n.Addr() }

// ID is this node's raft id: the member id that InspectMembers, the admin
// handler and lockraftctl show for it.
func (n *Node) ID() MemberID { return MemberID(n.n.ID()) }

// LeaderID is the member id of the leader as this node last saw it (0: none
// known). It is not the leader election of Campaign (type Leadership).
func (n *Node) LeaderID() MemberID { return MemberID(n.n.Leader()) }

// Leader is the raft id of the leader as this node last saw it (0: none).
//
// Deprecated: use LeaderID, which returns a MemberID like ID and the
// inspection views; Leader will be removed in the release after 0.2.
func (n *Node) Leader() uint64 { return n.n.Leader() }

// GossipAddr is the gossip address to give other members as a seed ("" without
// WithGossip).
func (n *Node) GossipAddr() string { return n.n.GossipAddr() }

// Lock is a held lock. Safe for concurrent use.
type Lock struct {
	h    *node.Hold
	m    *metrics // nil without WithMetrics
	prim int      // the "primitive" label it counts under (metrics.go)
}

// Unlock releases this hold (one level of a reentrant lock). It returns
// ErrNotHeld if this handle already unlocked or the lock was lost, and
// ErrSessionExpired if the node's session ended (the lock goes with it).
// If ctx ends first the outcome is unknown; the node keeps retrying the
// release.
func (l *Lock) Unlock(ctx context.Context) error {
	err := l.h.Release(ctx)
	if l.m != nil {
		l.m.observe(l.prim, opUnlock, time.Time{}, err)
	}
	return err
}

// Token is the fencing token: it strictly increases across grants of this
// name. Pass it to the resource you protect and reject lower ones.
func (l *Lock) Token() uint64 { return l.h.Token() }

// Context is cancelled when the lock is lost or released; context.Cause
// says why (ErrReleased, ErrLeaseExpired, ErrSessionExpired, ErrClosed).
func (l *Lock) Context() context.Context { return l.h.Context() }

// Name is the lock name.
func (l *Lock) Name() string { return l.h.Name() }

// Owner is the owner the lock is held for.
func (l *Lock) Owner() string { return l.h.Owner() }

// Renew restarts the lock's own lease (WithLease). Not logged: it goes to the
// leader only. ErrNotHeld if the lease already ran out.
func (l *Lock) Renew(ctx context.Context) error {
	err := l.h.Renew(ctx)
	if l.m != nil {
		l.m.observe(l.prim, opRenew, time.Time{}, err)
	}
	return err
}

// LockOption configures one Lock or TryLock call.
type LockOption func(*lockOptions)

type lockOptions struct {
	owner string
	lease time.Duration
}

// WithOwner names the owner: calls with the same owner on the same node
// re-enter (hold count + 1, same token); each needs its own Unlock. Go has no
// thread identity, so reentrancy is always explicit.
func WithOwner(owner string) LockOption { return func(o *lockOptions) { o.owner = owner } }

// WithLease gives the lock its own lease (like SET … PX): it is released when
// the lease runs out unless renewed with Renew. Without it the lock lives as
// long as the node's session. The lease is carried in whole milliseconds.
//
// The holder's Context ends 2·DriftRatio·d + one tick before the lease as
// counted from the send of the Acquire or last Renew, and a grant from the
// wait queue is first confirmed by one renewal, which may take up to d/2.
// So d has a floor, the larger of 2·(heartbeat interval + tick) and
// (heartbeat interval + 2·tick) / (1 − 2·DriftRatio): 600 ms with the
// default timings (100 ms tick, 200 ms heartbeat, 2 % drift). A shorter d is
// refused at the call with ErrInvalidLease, whose message names the floor;
// a negative d with ErrInvalidConfig. Give a lease a second or more and
// Renew well before it ends.
func WithLease(d time.Duration) LockOption { return func(o *lockOptions) { o.lease = d } }

// Option configures Join.
type Option func(*options)

type options struct {
	cfg     node.Config
	members []node.Member
	gossip  *node.GossipConfig
	ops     opsOptions      // metrics.go
	sec     securityOptions // security.go
}

func defaultOptions() options { return options{} }

// WithDataDir sets the directory for the raft log, lock table and snapshots.
// Required.
func WithDataDir(dir string) Option { return func(o *options) { o.cfg.DataDir = dir } }

// WithListenAddr sets the gRPC address this node listens on and that peers dial.
func WithListenAddr(addr string) Option { return func(o *options) { o.cfg.ListenAddr = addr } }

// WithAdvertiseAddr sets the gRPC address the other members dial to reach
// this one ("host:port", or "host" to keep the listening port). Default: the
// listening address. Required when WithListenAddr binds every interface
// ("0.0.0.0:7400", "[::]:7400", ":7400"): Join refuses such a bind without it
// (ErrInvalidConfig), since nothing could dial the wildcard. With static
// peers it is this replica's entry in Join's peer list. With WithGossip
// binding a wildcard too, its host is also the gossip advertise address
// unless the gossip options name one.
func WithAdvertiseAddr(addr string) Option { return func(o *options) { o.cfg.AdvertiseAddr = addr } }

// WithListener serves gRPC on an already bound listener.
func WithListener(l net.Listener) Option { return func(o *options) { o.cfg.Listener = l } }

// WithLogger sets the structured logger (default: discard). Durations are
// logged as text ("1.5s"), not as integer nanoseconds.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.cfg.Logger = withDurationText(l) }
}

// WithClusterID names the cluster; nodes reject traffic from other clusters.
func WithClusterID(id string) Option { return func(o *options) { o.cfg.ClusterID = id } }

// WithStaticMembers sets the founding voters with explicit raft ids, and
// this node's id, instead of deriving them from Join's peers.
func WithStaticMembers(self MemberID, members map[MemberID]string) Option {
	return func(o *options) {
		o.cfg.ID = uint64(self)
		o.members = o.members[:0]
		for id, addr := range members {
			o.members = append(o.members, node.Member{ID: uint64(id), Addr: addr})
		}
		slices.SortFunc(o.members, func(a, b node.Member) int { return cmp.Compare(a.ID, b.ID) })
	}
}

// WithTimings sets the raft tick and election timeout in ticks (defaults
// 100 ms and 10: an election after 1–2 s without a leader).
func WithTimings(tick time.Duration, electionTicks int) Option {
	return func(o *options) { o.cfg.TickInterval, o.cfg.ElectionTicks = tick, electionTicks }
}

// WithSessionTTL sets how long the cluster keeps a silent node's locks after
// its last keepalive, however often the leader changes (default 10 s, at most an hour). It
// must let a healthy session outlast two back-to-back leader failovers: at
// least MinSessionTTL of the election timeout, 5.4 election timeouts (5.4 s
// with the default timings). Join fails with ErrInvalidConfig below it.
func WithSessionTTL(d time.Duration) Option { return func(o *options) { o.cfg.SessionTTL = d } }

// MinSessionTTL is the shortest session TTL (WithSessionTTL) Join accepts
// for an election timeout (tick × election ticks, WithTimings; 1 s by
// default) with the default Tuning: 5.4 election timeouts (5.4 s with the
// default timings). Join checks that what a healthy session has left after
// the drift margin, a tick and a keepalive interval covers two back-to-back
// leader failovers (4.5 election timeouts):
//
//	SessionTTL·(1 − 2·DriftRatio) − tick − KeepaliveInterval ≥ 4.5 election timeouts
//
// MinSessionTTL solves it for a tick of a tenth of the election timeout, the
// default DriftRatio (0.02) and the shortest default KeepaliveInterval
// (SessionTTL/10). A longer Tuning.KeepaliveInterval or a larger DriftRatio
// raises the floor; Join's ErrInvalidConfig then gives the figures.
func MinSessionTTL(electionTimeout time.Duration) time.Duration {
	return node.MinSessionTTL(electionTimeout)
}

// WithLockDelay: after a session expires holding a lock, the name is not
// granted again for d (default 0).
func WithLockDelay(d time.Duration) Option { return func(o *options) { o.cfg.LockDelay = d } }

// WithMaxHolds sets the maximum reentrant depth (default 64).
func WithMaxHolds(n uint32) Option { return func(o *options) { o.cfg.MaxHolds = n } }
