package fleet

import (
	"context"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/transport"
)

// Host is what a Fleet needs of its node.
type Host interface {
	// On the loop goroutine only:

	// Leadership is the loop's view of who leads.
	Leadership() Leadership
	// ConfState is the configuration this node applied last.
	ConfState() *raftpb.ConfState
	// Status is raft's status (a leader's includes each member's progress).
	Status() raft.Status
	// Applied is the index of the last entry applied.
	Applied() uint64
	// ProposeConfChange proposes cc after the commands batched in this turn.
	ProposeConfChange(cc *raftpb.ConfChangeV2) error
	// ReadIndex starts a ReadIndex round carrying rctx; the node hands the
	// read states back through ReadStates.
	ReadIndex(rctx []byte)
	// Bootstrap starts raft with peers as its first voters (raft.RawNode's
	// Bootstrap; the Fleet checked that raft has no state).
	Bootstrap(peers []raft.Peer) error

	// On any goroutine:

	// Do runs f on the loop; it fails only if the node stopped. TryDo runs f
	// on the loop if its queue has room, and drops it otherwise.
	Do(ctx context.Context, f func()) error
	TryDo(f func())
	// Leader is the leader the loop saw last (0: none); LeaderChanged is
	// closed when it changes.
	Leader() uint64
	LeaderChanged() <-chan struct{}
	// Closing reports that Close or Leave has begun.
	Closing() bool
	// HasData reports whether this node has raft state; SessionOpen whether
	// it opened its session.
	HasData() bool
	SessionOpen() bool
	// PersistFormation records the node's formation id in its identity file,
	// durably, before it is used.
	PersistFormation(id string) error
	// WriteFile replaces the file name in the data directory atomically and
	// durably.
	WriteFile(name string, data []byte) error
	// Net is the node's transport.
	Net() Network
}

// Leadership is the loop's view of who leads.
type Leadership struct {
	Leader  uint64 // the leader (0: none known)
	Leading bool   // this node is the leader
	// Active: this node leads, the first entry of its term is applied (so
	// every configuration change committed before its term is applied
	// here), and it has not stopped serving.
	Active bool
	Term   uint64 // the term this node leads in
}

// Network is the part of the node's transport a Fleet uses:
// transport.Network has it.
type Network interface {
	transport.Caller
	// AddPeer makes peer id reachable at addr.
	AddPeer(id uint64, addr string)
	// PeerVersion is the software version peer last announced.
	PeerVersion(peer uint64) (version string, seen bool)
	// SetFormation tells the transport the node's formation id.
	SetFormation(id string) error
	// PeerRole is the role of the last verified certificate naming id
	// (transport.Network's).
	PeerRole(id uint64) (transport.Role, bool)
	// Revoke refuses member id from now on (transport.Network's).
	Revoke(id uint64)
}
