package simnet

import (
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The receiver's checks, as transport's server makes them (admission.go's
// admitStream, server.go's remoteMessageOK, formation.go's checkFormation).
// The sender is who it says: there is no TLS, as in transport's plaintext
// mode; its role is its endpoint's Config.Role (PlaintextRole if zero), as
// its certificate would say.
// The status messages start as transport's do, so that the caller's mapping
// (calls.go: clientError) tells a cluster mismatch from a formation
// mismatch from another refusal the way transport's client does.

// Status prefixes and limits shared with transport (unexported there).
const (
	clusterMismatchMsg   = "cluster id mismatch"
	formationMismatchMsg = "formation id mismatch"
	formationDetailSep   = "; its formation: "
	maxFormationDetail   = 4096
)

// Refusal kinds, as transport counts them (Refusals).
const (
	refusedRPC      = "rpc"
	refusedMessage  = "raft message"
	refusedSnapshot = "snapshot"
)

// authenticate checks what arrives at e from from: its cluster id,
// revocation, for raft traffic (a stream's messages or a snapshot) the
// sender's role (voters only) and Config.AdmitRaft, then its formation id
// (raft traffic may make e adopt the sender's formation), and records the
// sender's version.
// It returns the status error the sender sees. It runs e's AdoptFormation
// and OnForeignPeer, so the caller holds e (enterLocked).
func (e *Endpoint) authenticate(from uint64, rpc string, env envelope, raftTraffic bool) error {
	src := strconv.FormatUint(from, 10)
	if env.cluster != e.cfg.ClusterID {
		e.refused.Refuse(refusedRPC, src, "rpc", rpc, "reason", "another cluster",
			"local_cluster", e.cfg.ClusterID, "remote_cluster", env.cluster)
		return status.Errorf(codes.PermissionDenied, "%s: local %q, remote %q", clusterMismatchMsg, e.cfg.ClusterID, env.cluster)
	}
	e.n.mu.Lock()
	revoked := e.revoked[from]
	e.n.mu.Unlock()
	if revoked {
		e.refused.Refuse(refusedRPC, src, "rpc", rpc, "reason", "revoked member")
		return status.Errorf(codes.PermissionDenied, "member %d is revoked", from)
	}
	if raftTraffic {
		if !env.role.Voter() {
			e.refused.Refuse(refusedRPC, src, "rpc", rpc, "reason", "no voter role", "role", env.role.String())
			return status.Errorf(codes.PermissionDenied, "role %s may not send raft traffic", env.role)
		}
		if f := e.cfg.AdmitRaft; f != nil && !f(from) {
			e.refused.Note(refusedRPC, src, "rpc", rpc, "reason", "not admitted for raft traffic")
			return status.Errorf(codes.PermissionDenied, "member %d may not send raft traffic here", from)
		}
	}
	if err := e.checkFormation(from, rpc, env.formation, env.detail, raftTraffic); err != nil {
		return err
	}
	e.n.mu.Lock()
	e.versions[from] = env.version
	e.n.mu.Unlock()
	return nil
}

// checkFormation is transport's formation check (see transport/formation.go).
func (e *Endpoint) checkFormation(from uint64, rpc, remote, remoteDetail string, raftTraffic bool) error {
	local := e.Formation()
	switch {
	case remote == local:
		return nil
	case remote == "":
		if !raftTraffic || local == "" {
			return nil
		}
		return e.rejectFormation(from, rpc, local, remote, remoteDetail)
	case local == "":
		if !raftTraffic || e.cfg.AdoptFormation == nil {
			return nil
		}
		e.formMu.Lock()
		defer e.formMu.Unlock()
		if local = e.Formation(); local == remote {
			return nil
		}
		if local == "" {
			if err := e.cfg.AdoptFormation(remote); err != nil {
				e.log.Warn("simnet: cannot join the formed cluster of a peer", "rpc", rpc, "from", from,
					"remote_formation", remote, "err", err)
				msg := fmt.Sprintf("%s: local none, remote %q: %v", formationMismatchMsg, remote, err)
				if d := e.cfg.FormationDetail; d != "" {
					msg += formationDetailSep + d
				}
				return status.Error(codes.PermissionDenied, msg)
			}
			if err := e.setFormationLocked(remote); err != nil {
				return status.Errorf(codes.Internal, "formation: %v", err)
			}
			e.log.Info("simnet: joined a formed cluster", "formation", remote, "from", from)
			return nil
		}
	}
	return e.rejectFormation(from, rpc, local, remote, remoteDetail)
}

// rejectFormation tells OnForeignPeer (or the log) once per (peer,
// formation) and returns the PermissionDenied status.
func (e *Endpoint) rejectFormation(from uint64, rpc, local, remote, remoteDetail string) error {
	key := strconv.FormatUint(from, 10) + "/" + remote
	e.n.mu.Lock()
	seen := e.loggedForeign[key]
	e.loggedForeign[key] = true
	e.n.mu.Unlock()
	if !seen {
		if f := e.cfg.OnForeignPeer; f != nil && remote != "" {
			if len(remoteDetail) > maxFormationDetail {
				remoteDetail = ""
			}
			f(from, remoteDetail, false)
		} else {
			e.log.Warn("simnet: rejected a peer of another formed cluster; it is ignored from now on",
				"rpc", rpc, "from", from, "local_formation", local, "remote_formation", remote)
		}
	}
	msg := fmt.Sprintf("%s: local %q, remote %q", formationMismatchMsg, local, remote)
	if d := e.cfg.FormationDetail; d != "" {
		msg += formationDetailSep + d
	}
	return status.Error(codes.PermissionDenied, msg)
}

// formationDetail returns what follows formationDetailSep in a mismatch
// status message.
func formationDetail(msg string) string {
	_, d, _ := strings.Cut(msg, formationDetailSep)
	if len(d) > maxFormationDetail {
		d = d[:maxFormationDetail]
	}
	return d
}

// streamRefused is the sender's side of a refused raft stream (transport's
// peer.streamFailed): a formation mismatch is said once per peer, through
// OnForeignPeer when set; another refusal is logged. The caller then reports
// the peer unreachable. The caller holds e.
func (e *Endpoint) streamRefused(peer uint64, err error) {
	st, _ := status.FromError(err)
	switch {
	case st.Code() == codes.PermissionDenied && strings.HasPrefix(st.Message(), formationMismatchMsg):
		e.n.mu.Lock()
		said := e.foreign[peer]
		e.foreign[peer] = true
		e.n.mu.Unlock()
		if said {
			return
		}
		if f := e.cfg.OnForeignPeer; f != nil {
			f(peer, formationDetail(st.Message()), true)
		} else {
			e.log.Warn("simnet: peer belongs to another formed cluster; not sending to it", "peer", peer, "err", err)
		}
	case st.Code() == codes.PermissionDenied:
		e.log.Warn("simnet: peer rejected stream", "peer", peer, "err", err)
	default:
		e.log.Debug("simnet: stream to peer failed", "peer", peer, "err", err)
	}
}

// remoteMessageOK is transport's filter of what a remote peer may send over
// the message stream: addressed to this node, from the authenticated
// sender, never one of raft's local messages or a message naming raft's
// local threads, never MsgSnap (it comes as a snapshot transfer), never
// with local responses.
func remoteMessageOK(m *raftpb.Message, local, from uint64) (bool, string) {
	switch {
	case m.GetTo() != local:
		return false, "addressed to another node"
	case m.GetFrom() != from:
		return false, "sender differs from the authenticated peer"
	case raft.IsLocalMsg(m.GetType()) || raft.IsLocalMsgTarget(m.GetFrom()) || raft.IsLocalMsgTarget(m.GetTo()):
		return false, "raft local message"
	case m.GetType() == raftpb.MessageType_MsgSnap:
		return false, "snapshot outside the Snapshot RPC"
	case len(m.GetResponses()) > 0:
		return false, "carries local responses"
	}
	return true, ""
}
