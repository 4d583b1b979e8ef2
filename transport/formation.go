package transport

import "github.com/lockraft/lockraft/internal/netrules"

// Formation check
//
// A formed cluster has an identity of its own, the formation id: a random id
// made when it was bootstrapped, kept in each member's data directory (see
// node/internal/fleet/formation.go). ClusterID is what the operator typed
// and two clusters can share it; the formation id is never shared. Every
// stream, snapshot and call carries the sender's formation id (mdFormation,
// "" for a node that has not joined a formed cluster) and the receiver
// checks it when the RPC's headers arrive (admitStream), for every RPC
// (the check itself is netrules.Formation, which simnet shares):
//
//   - the same id, or the sender has none (a fresh node: a joining member's
//     first calls, a light member): accepted;
//   - the receiver has none and the RPC carries raft traffic (a stream or a
//     snapshot) from a node that has one: the receiver is being added to
//     that cluster. AdoptFormation persists the id first; from then on the
//     receiver belongs to that formation for good. Two clusters that both
//     add the same fresh node race here, and one of them loses;
//   - the receiver has an id and raft traffic comes without one: rejected.
//     A node of a formed cluster only ever sends raft traffic once it holds
//     the id (a stream opened before that is reopened), so this is a node
//     from before formation ids (its cluster has no identity to check);
//   - two different ids: rejected with PermissionDenied. The clusters never
//     exchange a raft message or a call, so neither can take the other's
//     log, votes or members.

// mdFormation is the header carrying the sender's formation id.
const mdFormation = "lockraft-formation"

// mdFormationDetail carries the sender's FormationDetail on streams.
const mdFormationDetail = "lockraft-formation-detail"

// ErrFormationMismatch is returned by Call when the remote node belongs to
// another formed cluster (same ClusterID, another formation id).
var ErrFormationMismatch = netrules.ErrFormationMismatch

// Formation returns this node's formation id ("" if none yet).
func (t *Transport) Formation() string { return t.form.ID() }

// SetFormation records this node's formation id once the node has persisted
// it (the node adopts only once; see AdoptFormation). Setting the id it
// already has is a no-op; any other change is refused with
// ErrFormationMismatch. Streams opened before are reopened, so that from now
// on every message carries the id.
func (t *Transport) SetFormation(id string) error { return t.form.Set(id) }
