package forward

import (
	"sync/atomic"
	"time"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// Config is what a node's forwarding is made with.
type Config struct {
	ID            uint64        // this node's raft id
	RetryInterval time.Duration // a forwarded command's retry timer; every call times out after it (FwdOpen: twice)
	SessionTTL    time.Duration // the TTL a light member asks for its session
	// Net makes the calls to the leader and to light members.
	Net transport.Caller
	// Table is the node's lock table (the leader reads sessions, locks and
	// elections from it).
	Table Table
	// ErrCode is the wire code of an error in a pushed result (the node's
	// error vocabulary: lockfsm's stable codes and the node's own).
	ErrCode func(error) uint32
	// Forwarded, if set, is told how long each FwdPropose call took.
	Forwarded func(time.Duration)
	// Stop is closed when the node stops: senders drop what they hold.
	Stop <-chan struct{}
}

// Table is the lock table as the leader's side reads it (*lockfsm.FSM).
type Table interface {
	AppliedIndex() uint64
	Sessions() []lockfsm.SessionInfo
	Lock(name string) (lockfsm.LockInfo, bool)
	Leader(name string) (lockfsm.LeaderInfo, bool)
}

// Host is the node as forwarding needs it. Its methods are called from the
// loop unless their comment says otherwise.
type Host interface {
	Runner
	Member
	Leader
}

// Runner is how forwarding runs work and follows a leader.
type Runner interface {
	// Go runs f on a goroutine the node waits for when it stops (from the
	// loop, or from a goroutine Go started).
	Go(f func())
	// Do runs f in the loop, waiting for room; f is dropped if the node
	// stopped (from Go's goroutines).
	Do(f func())
	// TryDo runs f in the loop unless the loop is busy or gone (any
	// goroutine).
	TryDo(f func())

	// Light reports whether this node is a light member: gossip, no raft
	// state.
	Light() bool
	// Leader is the leader the loop follows (0: none known).
	Leader() uint64
	// SeenLeader is the leader as the loop last published it (any
	// goroutine).
	SeenLeader() uint64
	// RaftLeader is the leader raft itself follows (0: none); a light
	// member that raft follows a leader is being added to the
	// configuration, and raft's view wins.
	RaftLeader() uint64
	// SetLeader makes the loop follow id (0: none). A light member that
	// finds a leader proposes its in-flight commands again at once.
	SetLeader(id uint64)
	// Members are the gossip members (nil without gossip; any goroutine).
	Members() []membership.Member
}

// Member is the light member's own state that forwarding reads and acts
// on: its session, its pending commands, its observers.
type Member interface {
	// Session is the member's session (0: none open).
	Session() uint64
	// SessionOpened: the leader applied the member's OpenSession with
	// nonce as session.
	SessionOpened(nonce, session uint64)
	// EachQueued calls f for each Acquire applied as Queued, awaiting its
	// grant; EachInflight for each command awaiting its result.
	EachQueued(f func(Op))
	EachInflight(f func(Op))
	// Inflight and Queued look a command up by seq.
	Inflight(seq uint64) (Op, bool)
	Queued(seq uint64) (Op, bool)
	// Relearned completes the in-flight Acquire seq with the result a
	// status call re-learned (its result push was lost).
	Relearned(seq uint64, res lockfsm.Result)
	// StatusEvent hands the member an event a status call re-learned for a
	// queued Acquire (its grant, or its end).
	StatusEvent(ev *lockfsm.Event)
	// StatusAnswered hands the leader's answer to a status call to the
	// member, which checks its session and applies it (ApplyStatus).
	StatusAnswered(session uint64, seqs []uint64, facts []*transportpb.StatusFact)
	// Pushed hands the items of a FwdPropose reply to the loop as a push
	// (the calling goroutine).
	Pushed(items []*transportpb.PushItem)

	// EachWatched calls f for each election name the member's observers
	// watch: whether its state is known, and the index up to which the
	// observers got every change (chain).
	EachWatched(f func(name string, known bool, chain uint64))
	// Watched is the same for one name; ok false if nobody watches it.
	Watched(name string) (known bool, chain uint64, ok bool)
	// Deliver hands c to the observers of its name (never an index they
	// got before).
	Deliver(c Change)
	// Known records that the observers of name know every change up to
	// chain.
	Known(name string, chain uint64)
	// Lagged ends the observers of name with ErrObserveLagged: the leader
	// cannot show them every change they missed.
	Lagged(name string)
}

// Leader is what the leader's side needs of the node.
type Leader interface {
	// Ready reports whether this leader's lock table is complete: its
	// term's first entry is applied.
	Ready() bool
	// InConfig reports whether id is in the raft configuration (voter,
	// learner, or outgoing voter).
	InConfig(id uint64) bool
	// CheckForwarded decodes and authorises a command member from
	// forwarded: err refuses the whole call; known false holds the command
	// back (its session is not known to the leader yet: the member
	// retries).
	CheckForwarded(from uint64, data []byte) (cmd lockfsm.Command, known bool, err error)
	// Admit is nil if a forwarded command may be proposed now, else the
	// error its result carries (the version gate).
	Admit(data []byte) error
	// Propose proposes an encoded command.
	Propose(data []byte)
	// CheckOwner is non-nil if session is another member's than from.
	CheckOwner(from, session uint64) error
	// SessionOpen reports whether the leader times session (it is open).
	SessionOpen(session uint64) bool
}

// Op is what forwarding reads of one of the member's commands.
type Op struct {
	Seq           uint64
	Kind          lockfsm.Kind
	Name, Owner   string
	Parked        bool      // not re-proposed: the Cancel for it settles it
	Abandoned     bool      // the caller gave up
	FirstProposed time.Time // zero until first proposed
}

// State is the forwarding state of one node, member and leader side.
type State struct {
	cfg  Config
	host Host
	// rotor picks among the members that may know the leader (Target).
	rotor atomic.Uint64

	// member side
	out      *sender[[]byte] // proposals on their way to the leader
	statusAt time.Time       // last fwd-status sent
	waitedAt time.Time       // last fwd-status that asked about the queued Acquires
	probeAt  time.Time       // last leader probe
	// observeAt: last Observe call sent; observeDue: send one now (a new
	// leader, a gap, a new name); observeBusy: one is in flight.
	observeAt   time.Time
	observeDue  bool
	observeBusy bool

	// leader side
	leading bool
	remote  map[uint64]uint64 // session -> node, sessions of light members
	// closers: session -> the light member that forwarded its CloseSession
	// (an earlier incarnation's or a duplicate session: no longer in remote
	// once closed, and the member waits for the result to stop retrying).
	closers    map[uint64]uint64
	pushers    map[uint64]*sender[*transportpb.PushItem]
	pushesSent uint64
	opens      map[openKey]*pendingOpen
	replies    map[uint64]*replyWaiter         // node -> its fwd-propose call held for results (reply.go)
	subs       map[string]map[uint64]time.Time // election name -> light members watching it -> last Observe call

	// every raft member: recent election changes, for light members
	// (history.go)
	elections map[string]*history
	cover     cover
}

// New returns a node's forwarding state.
func New(cfg Config, host Host) *State {
	s := &State{
		cfg:       cfg,
		host:      host,
		remote:    map[uint64]uint64{},
		closers:   map[uint64]uint64{},
		pushers:   map[uint64]*sender[*transportpb.PushItem]{},
		opens:     map[openKey]*pendingOpen{},
		replies:   map[uint64]*replyWaiter{},
		subs:      map[string]map[uint64]time.Time{},
		elections: map[string]*history{},
		cover:     cover{from: cfg.Table.AppliedIndex()},
	}
	s.out = &sender[[]byte]{send: s.sendForwarded, run: host.Go, stop: cfg.Stop}
	return s
}

// WaitCheck is how often a light member with queued Acquires asks the
// leader about them (Tick), and re-subscribes its observers: a quarter of
// the session TTL, at least RetryInterval.
func (s *State) WaitCheck() time.Duration {
	return max(s.cfg.RetryInterval, s.cfg.SessionTTL/4)
}

// Target is where a forwarded call goes: the known leader, else some alive
// member with raft data (any goroutine).
func (s *State) Target() uint64 {
	if l := s.host.SeenLeader(); l != 0 {
		return l
	}
	var cands []uint64
	for _, m := range s.host.Members() {
		if m.State == membership.StateAlive && m.Meta.HasData && m.Meta.RaftID != s.cfg.ID {
			cands = append(cands, m.Meta.RaftID)
		}
	}
	if len(cands) == 0 {
		return 0
	}
	return cands[s.rotor.Add(1)%uint64(len(cands))]
}

// answered handles the leader part of a reply (any goroutine): true if
// target answered as the leader.
func (s *State) answered(target uint64, notLeader *transportpb.LeaderHint, err error) bool {
	switch {
	case err != nil:
		s.host.TryDo(func() { s.LeaderLost(target) })
		return false
	case notLeader != nil:
		hint := notLeader.GetLeader()
		s.host.TryDo(func() {
			s.LeaderLost(target)
			if hint != 0 && hint != s.cfg.ID {
				s.leaderFound(hint)
			}
		})
		return false
	}
	s.host.TryDo(func() { s.leaderFound(target) })
	return true
}

// leaderFound makes a light member follow id.
func (s *State) leaderFound(id uint64) {
	h := s.host
	if !h.Light() || id == 0 || id == h.Leader() {
		return
	}
	if rl := h.RaftLeader(); rl != 0 && rl != id {
		return // raft itself follows a leader (this node is being added): its view wins
	}
	h.SetLeader(id)
	s.statusAt, s.waitedAt = time.Time{}, time.Time{}
	s.observeDue = true // subscribe with the new leader
}

// LeaderLost forgets a leader that failed a call or denied leading.
func (s *State) LeaderLost(id uint64) {
	h := s.host
	if !h.Light() || h.Leader() != id || id == 0 {
		return
	}
	if h.RaftLeader() == id {
		// Raft itself follows id: this node is being added and is light only
		// until its first write is durable. Forgetting id here would leave
		// the loop without a leader that raft never reports again.
		return
	}
	h.SetLeader(0)
}

func notLeader(hint uint64) *transportpb.LeaderHint { return &transportpb.LeaderHint{Leader: hint} }
