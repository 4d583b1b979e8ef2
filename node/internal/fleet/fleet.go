package fleet

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/membership"
)

// Config is what a Fleet is made with; fixed for its life.
type Config struct {
	ID        uint64 // this node's raft id
	ClusterID string
	Version   string // the software version this node tells its peers
	DataDir   string // where the version gate's record is kept ("": nowhere)
	// Authenticated: a caller's id is its certificate's (TLS), so a
	// formation candidate must be the caller (Answer). Without TLS nothing
	// backs an id, and a candidate is taken at its word.
	Authenticated bool

	// Gossip is the node's gossip configuration (defaults are applied
	// here); nil with static members.
	Gossip *membership.Config
	// Static is the static member list (nil with gossip).
	Static []Member
	// Formation is the formation id the node's identity file holds ("" if
	// none yet).
	Formation string

	// ElectionTimeout bounds configuration changes in flight, calls and
	// confirmation rounds; TickInterval paces retries; RetryInterval bounds
	// a follower's question to the leader about the version gate.
	ElectionTimeout time.Duration
	TickInterval    time.Duration
	RetryInterval   time.Duration

	// The node's errors the Fleet's refusals are: a member is known to run
	// a version without the catalogue (the gate's refusals wrap it); a step
	// on the leader cannot be taken now and the caller retries.
	ErrOlderMembers error
	ErrUnavailable  error

	// Now is the node's clock (the version gate's wait); Ticker makes the
	// gossip goroutine's tickers.
	Now    func() time.Time
	Ticker func(d time.Duration) (<-chan time.Time, func())

	Log  *slog.Logger
	Host Host
}

// Fleet is one node's cluster management.
type Fleet struct {
	cfg  Config
	host Host
	log  *slog.Logger

	forwarded lockfsm.Command // AdmitForwarded's decoded entry, its slices reused (loop)

	// Gossip mode (zero with static members): the configuration with
	// defaults, this member's gossip name and the sorted founders list.
	gossip   *membership.Config
	name     string
	founders []string
	addr     string                 // the node's advertised gRPC address (StartGossip)
	ml       *membership.Membership // the running member (StartGossip)
	events   chan membership.Event
	// list is the gossip view reconcile and the gate read: ml.Members, or a
	// unit test's.
	list func() []membership.Member

	members *MemberSet

	// formation is this node's formation id ("" if none yet), as in its
	// identity file; formMu serialises adopting one (formation.go).
	formMu    sync.Mutex
	formation string

	// gateOpen: every configuration member is known to run the lock
	// catalogue (versiongate.go); once set, it stays set.
	gateOpen atomic.Bool
	// runsOpen: every configuration member is known to end sessions in
	// runs (sessionruns.go); once set, it stays set.
	runsOpen atomic.Bool

	static staticCheck // members on another static list (staticlist.go)

	rec reconcileState // owned by the loop (reconcile.go)
}

// New makes a node's Fleet. It reads the version gate's record.
func New(cfg Config) *Fleet {
	f := &Fleet{cfg: cfg, host: cfg.Host, log: cfg.Log, formation: cfg.Formation}
	ids := make([]uint64, 0, len(cfg.Static))
	for _, m := range cfg.Static {
		ids = append(ids, m.ID)
	}
	f.members = NewMemberSet(ids)
	f.rec.leaveWait = map[uint64][]chan error{} // Leave works in static mode too
	f.name = gossipName(&membership.Config{}, cfg.ID)
	if cfg.Gossip != nil {
		g := WithDefaults(*cfg.Gossip)
		f.gossip = &g
		f.name = gossipName(&g, cfg.ID)
		f.founders = founders(&g, f.name)
		f.rec.marks.ByID = map[uint64]HealthMark{}
		f.rec.removed = map[uint64]bool{}
		f.rec.foreign = map[uint64]bool{}
	}
	f.loadGate()
	return f
}

// MemberSet is who may send this node raft messages.
func (f *Fleet) MemberSet() *MemberSet { return f.members }

// GossipName is this member's gossip name (with static members, the
// default one).
func (f *Fleet) GossipName() string { return f.name }
