// Package netrules holds the rules of lockraft's node-to-node network, once
// for the two networks that follow them: package transport (gRPC) and
// package internal/simnet (the simulated network that stands in for it in
// deterministic tests). What a receiver admits, how a refusal reads on the
// wire and how the caller maps it back to an error are written here, so
// that the simulation cannot drift from what it simulates.
//
// The sentinel errors are transport's (transport.ErrClusterMismatch, ...):
// transport gives them their public names, which are the same values, so
// errors.Is holds whichever name a caller compares with. They are described
// at their public names.
//
// netrules imports nothing of lockraft's but internal/refuse, so transport
// can use it.
package netrules

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/internal/refuse"
	"github.com/lockraft/lockraft/internal/views"
)

// Errors a Call can return (transport's names).
var (
	ErrClusterMismatch   = errors.New("transport: cluster id mismatch")
	ErrFormationMismatch = errors.New("transport: formation id mismatch")
	ErrPermissionDenied  = errors.New("transport: permission denied")
	ErrInvalidRequest    = errors.New("transport: invalid request")
	ErrUnauthenticated   = errors.New("transport: unauthenticated")
)

// ClusterMismatchMsg prefixes the PermissionDenied status of a cluster
// mismatch so that callers can map it back to ErrClusterMismatch.
const ClusterMismatchMsg = "cluster id mismatch"

// Refusal kinds (refuse.Log kinds, transport.Transport.Refusals).
const (
	RefusedRPC      = "rpc"
	RefusedMessage  = "raft message"
	RefusedSnapshot = "snapshot"
)

// Role is what the receiver's checks ask of a sender's role
// (transport.Role).
type Role interface {
	Voter() bool
	String() string
}

// Receiver is what a receiving node checks every RPC's sender against.
type Receiver struct {
	ClusterID string
	Revoked   func(id uint64) bool   // whether id is revoked
	AdmitRaft func(from uint64) bool // Config.AdmitRaft; nil admits every voter
	Refused   *refuse.Log
}

// Admit checks the sender of an RPC (its id and role established): its
// cluster id, its revocation and, for raft traffic (a stream or a
// snapshot), its role (voters only) and AdmitRaft. It counts a refusal and
// returns the PermissionDenied status the sender sees.
func (r *Receiver) Admit(rpc string, from uint64, role Role, cluster string, raftTraffic bool) error {
	src := views.MemberID(from).String()
	if cluster != r.ClusterID {
		r.Refused.Refuse(RefusedRPC, src, "rpc", rpc, "reason", "another cluster",
			"local_cluster", r.ClusterID, "remote_cluster", cluster)
		return status.Errorf(codes.PermissionDenied, "%s: local %q, remote %q",
			ClusterMismatchMsg, r.ClusterID, cluster)
	}
	if r.Revoked(from) {
		r.Refused.Refuse(RefusedRPC, src, "rpc", rpc, "reason", "revoked member")
		return status.Errorf(codes.PermissionDenied, "member %016x is revoked", from)
	}
	if raftTraffic {
		if !role.Voter() {
			r.Refused.Refuse(RefusedRPC, src, "rpc", rpc, "reason", "no voter role", "role", role.String())
			return status.Errorf(codes.PermissionDenied, "role %s may not send raft traffic", role)
		}
		if f := r.AdmitRaft; f != nil && !f(from) {
			r.Refused.Note(RefusedRPC, src, "rpc", rpc, "reason", "not admitted for raft traffic")
			return status.Errorf(codes.PermissionDenied, "member %016x may not send raft traffic here", from)
		}
	}
	return nil
}

// RemoteMessageOK reports whether m may arrive from peer from over the
// message stream: addressed to this node, from the stream's authenticated
// sender, and of a type a remote peer may send. raft's local messages
// (storage acknowledgements, ticks, reports) and messages naming raft's
// local threads would bypass raft's own guard (RawNode.Step accepts a local
// message whose From is a local thread); a snapshot must come with its file
// over Snapshot. Everything else is judged by the node against raft's state.
func RemoteMessageOK(m *raftpb.Message, local, from uint64) (bool, string) {
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

// CallError maps a Calls handler's error to the status the caller sees.
func CallError(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return status.FromContextError(err).Err()
	case errors.Is(err, ErrPermissionDenied):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, ErrInvalidRequest):
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Error(codes.Unknown, err.Error())
}

// ClientError maps the error of call method to peer to, made with ctx, to
// what Call returns: the context's error if it ended, else the sentinel of
// the status's refusal (wrapped), else err.
func ClientError(ctx context.Context, method string, to uint64, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("transport: %s to %016x: %w", method, to, ctx.Err())
	}
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.DeadlineExceeded:
		// The server sees the propagated deadline first and may answer
		// before ctx itself has expired here.
		return fmt.Errorf("transport: %s to %016x: %w (%s)", method, to, context.DeadlineExceeded, st.Message())
	case codes.PermissionDenied:
		if strings.HasPrefix(st.Message(), ClusterMismatchMsg) {
			return fmt.Errorf("%w: %s to %016x: %s", ErrClusterMismatch, method, to, st.Message())
		}
		if strings.HasPrefix(st.Message(), FormationMismatchMsg) {
			return fmt.Errorf("%w: %s to %016x: %s", ErrFormationMismatch, method, to, st.Message())
		}
		if strings.Contains(st.Message(), lockerr.ErrQuotaExceeded.Error()) {
			// A quota refusal (node/internal/privilege): typed for the
			// caller, as the same refusal is on a raft member.
			return fmt.Errorf("%w: %w: %s to %016x: %s", ErrPermissionDenied, lockerr.ErrQuotaExceeded, method, to, st.Message())
		}
		return fmt.Errorf("%w: %s to %016x: %s", ErrPermissionDenied, method, to, st.Message())
	case codes.InvalidArgument:
		return fmt.Errorf("%w: %s to %016x: %s", ErrInvalidRequest, method, to, st.Message())
	case codes.Unauthenticated:
		return fmt.Errorf("%w: %s to %016x: %s", ErrUnauthenticated, method, to, st.Message())
	}
	return err
}

// SnapshotPath is where the snapshot file for raft index index lives in dir.
func SnapshotPath(dir string, index uint64) string {
	return filepath.Join(dir, fmt.Sprintf("%016x.snap", index))
}

// SnapshotTempPattern names the file of one snapshot transfer in progress
// (os.CreateTemp pattern): the index and a random suffix per transfer.
func SnapshotTempPattern(index uint64) string { return fmt.Sprintf("%016x.snap.tmp-*", index) }

// RemoveSnapshotTemps deletes the files of transfers a crash interrupted.
func RemoveSnapshotTemps(dir string) error {
	tmps, err := filepath.Glob(filepath.Join(dir, "*.snap.tmp-*"))
	if err != nil {
		return err
	}
	for _, p := range tmps {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}
