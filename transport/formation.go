package transport

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Formation check
//
// A formed cluster has an identity of its own, the formation id: a random id
// made when it was bootstrapped, kept in each member's data directory (see
// node/internal/fleet/formation.go). ClusterID is what the operator typed
// and two clusters can share it; the formation id is never shared. Every
// stream, snapshot and call carries the sender's formation id (mdFormation,
// "" for a node that has not joined a formed cluster) and the receiver
// checks it when the RPC's headers arrive (admitStream), for every RPC:
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

// formationDetailSep separates a mismatch status from the rejecting node's
// FormationDetail.
const formationDetailSep = "; its formation: "

// maxFormationDetail bounds a FormationDetail (and what is read of one).
const maxFormationDetail = 4096

// formationDetail returns what follows formationDetailSep in a mismatch
// status message ("" if nothing).
func formationDetail(msg string) string {
	_, d, _ := strings.Cut(msg, formationDetailSep)
	if len(d) > maxFormationDetail {
		d = d[:maxFormationDetail]
	}
	return d
}

// formationMismatchMsg prefixes the PermissionDenied status of a formation
// mismatch so that callers can map it back to ErrFormationMismatch.
const formationMismatchMsg = "formation id mismatch"

// ErrFormationMismatch is returned by Call when the remote node belongs to
// another formed cluster (same ClusterID, another formation id).
var ErrFormationMismatch = errors.New("transport: formation id mismatch")

// formation is the Transport's part of the formation check.
type formation struct {
	id     atomic.Pointer[string]
	gen    atomic.Uint64 // bumped when id is set: streams opened before reopen
	mu     sync.Mutex    // serialises adoption
	logged sync.Map      // "peer/remote id" pairs already logged as foreign
}

// Formation returns this node's formation id ("" if none yet).
func (t *Transport) Formation() string {
	if p := t.form.id.Load(); p != nil {
		return *p
	}
	return ""
}

// SetFormation records this node's formation id once the node has persisted
// it (the node adopts only once; see AdoptFormation). Setting the id it
// already has is a no-op; any other change is refused with
// ErrFormationMismatch. Streams opened before are reopened, so that from now
// on every message carries the id.
func (t *Transport) SetFormation(id string) error {
	t.form.mu.Lock()
	defer t.form.mu.Unlock()
	return t.setFormationLocked(id)
}

func (t *Transport) setFormationLocked(id string) error {
	switch cur := t.Formation(); {
	case cur == id:
		return nil
	case cur != "":
		return ErrFormationMismatch
	}
	t.form.id.Store(&id)
	t.form.gen.Add(1)
	return nil
}

// formationVerdict is the formation check of a stream's headers
// (admitStream), which must not block: it accepts or refuses, except that
// an adoption is left to the stream's handler (checkFormation), before it
// reads anything: adopt is then the id to adopt.
func (t *Transport) formationVerdict(from uint64, rpc, remote, remoteDetail string, raftTraffic bool) (adopt string, err error) {
	local := t.Formation()
	switch {
	case remote == local:
		return "", nil
	case remote == "":
		if !raftTraffic || local == "" {
			return "", nil
		}
	case local == "":
		if !raftTraffic || t.cfg.AdoptFormation == nil {
			return "", nil
		}
		return remote, nil
	}
	return "", t.rejectFormation(from, rpc, local, remote, remoteDetail)
}

// checkFormation is the whole formation check, adoption included; see the
// comment at the top of this file. raftTraffic is true for streams and
// snapshots.
func (t *Transport) checkFormation(from uint64, rpc, remote, remoteDetail string, raftTraffic bool) error {
	local := t.Formation()
	switch {
	case remote == local:
		return nil
	case remote == "":
		if !raftTraffic || local == "" {
			return nil
		}
		return t.rejectFormation(from, rpc, local, remote, remoteDetail)
	case local == "":
		if !raftTraffic || t.cfg.AdoptFormation == nil {
			return nil
		}
		t.form.mu.Lock()
		defer t.form.mu.Unlock()
		if local = t.Formation(); local == remote {
			return nil // adopted meanwhile by another RPC
		}
		if local == "" {
			if err := t.cfg.AdoptFormation(remote); err != nil {
				t.log.Warn("transport: cannot join the formed cluster of a peer", "rpc", rpc, "from", from,
					"remote_formation", remote, "err", err)
				msg := fmt.Sprintf("%s: local none, remote %q: %v", formationMismatchMsg, remote, err)
				if d := t.cfg.FormationDetail; d != "" {
					msg += formationDetailSep + d
				}
				return status.Error(codes.PermissionDenied, msg)
			}
			if err := t.setFormationLocked(remote); err != nil {
				return status.Errorf(codes.Internal, "formation: %v", err)
			}
			t.log.Info("transport: joined a formed cluster", "formation", remote, "from", from)
			return nil
		}
	}
	return t.rejectFormation(from, rpc, local, remote, remoteDetail)
}

// rejectFormation logs a foreign peer once per (peer, formation) and returns
// the PermissionDenied status.
func (t *Transport) rejectFormation(from uint64, rpc, local, remote, remoteDetail string) error {
	key := strconv.FormatUint(from, 10) + "/" + remote
	if _, seen := t.form.logged.LoadOrStore(key, true); !seen {
		if f := t.cfg.OnForeignPeer; f != nil && remote != "" {
			if len(remoteDetail) > maxFormationDetail {
				remoteDetail = ""
			}
			f(from, remoteDetail, false) // the node says it, with what it knows
		} else {
			t.log.Warn("transport: rejected a peer of another formed cluster; it is ignored from now on",
				"rpc", rpc, "from", from, "local_formation", local, "remote_formation", remote)
		}
	}
	msg := fmt.Sprintf("%s: local %q, remote %q", formationMismatchMsg, local, remote)
	if d := t.cfg.FormationDetail; d != "" {
		msg += formationDetailSep + d
	}
	return status.Error(codes.PermissionDenied, msg)
}
