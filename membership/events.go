package membership

import "time"

// State is a member's gossip state as seen by this member.
//
// memberlist v0.7 does not expose its internal "suspect" state through its
// public API, so there is no Suspect here: a suspected member is still Alive
// until the suspicion times out and it is declared Failed. Health for raft
// decisions must come from the leader's raft progress as well (see PlanVoters).
type State uint8

const (
	// StateAlive: the member answers gossip probes (or has not yet been
	// declared failed).
	StateAlive State = iota
	// StateFailed is memberlist's "dead": the member stopped answering probes,
	// directly and indirectly, for the suspicion timeout. It may be crashed,
	// paused (GC, CPU starvation), or partitioned from some members only. It
	// is a hint of ill health, never proof: do not remove a raft voter
	// because of it alone.
	StateFailed
	// StateLeft: the member announced a graceful leave before going away.
	StateLeft
)

func (s State) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateFailed:
		return "failed"
	case StateLeft:
		return "left"
	}
	return "unknown"
}

// Member is one member of the cluster as seen by this member.
type Member struct {
	Name       string    // gossip node name
	Addr       string    // gossip "host:port"
	Meta       Meta      // last metadata received
	State      State     // gossip state
	LastChange time.Time // when this member last saw State or Meta change
}

// EventKind says what changed.
type EventKind uint8

const (
	// EventJoin: a member became Alive (first seen, or back after Failed/Left).
	EventJoin EventKind = iota + 1
	// EventUpdate: an Alive member changed its Meta.
	EventUpdate
	// EventLeave: a member left gracefully (State Left).
	EventLeave
	// EventFailed: gossip declared the member dead (State Failed). See
	// StateFailed for what this does and does not mean.
	EventFailed
)

func (k EventKind) String() string {
	switch k {
	case EventJoin:
		return "join"
	case EventUpdate:
		return "update"
	case EventLeave:
		return "leave"
	case EventFailed:
		return "failed"
	}
	return "unknown"
}

// Event is one membership change. Events for one Membership are produced by a
// single goroutine, in the order this member observed them; events for the
// local member are included (a Join at Start).
type Event struct {
	Kind   EventKind
	Member Member
}
