package netrules

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockraft/lockraft/internal/views"
)

// FormationMismatchMsg prefixes the PermissionDenied status of a formation
// mismatch so that callers can map it back to ErrFormationMismatch.
const FormationMismatchMsg = "formation id mismatch"

// FormationDetailSep separates a mismatch status from the rejecting node's
// FormationDetail.
const FormationDetailSep = "; its formation: "

// MaxFormationDetail bounds a FormationDetail (and what is read of one).
const MaxFormationDetail = 4096

// FormationDetail returns what follows FormationDetailSep in a mismatch
// status message ("" if nothing).
func FormationDetail(msg string) string {
	_, d, _ := strings.Cut(msg, FormationDetailSep)
	if len(d) > MaxFormationDetail {
		d = d[:MaxFormationDetail]
	}
	return d
}

// ForeignRefusal reports whether err, a refused stream's error, says the
// peer belongs to another formed cluster, and the peer's FormationDetail.
func ForeignRefusal(err error) (detail string, ok bool) {
	st, _ := status.FromError(err)
	if st.Code() != codes.PermissionDenied || !strings.HasPrefix(st.Message(), FormationMismatchMsg) {
		return "", false
	}
	return FormationDetail(st.Message()), true
}

// Formation is a node's formation id and the receiver's check of it (see
// the comment at the top of transport/formation.go). The exported fields
// and Init are set before it is used.
type Formation struct {
	Adopt     func(id string) error                       // Config.AdoptFormation
	Detail    string                                      // Config.FormationDetail
	OnForeign func(id uint64, detail string, dialed bool) // Config.OnForeignPeer
	Log       *slog.Logger
	Name      string // prefixes its log lines ("transport")

	id     atomic.Pointer[string]
	gen    atomic.Uint64 // bumped when id is set: streams opened before reopen
	mu     sync.Mutex    // serialises adoption
	logged sync.Map      // "peer/remote id" pairs already refused
}

// Init sets the id the node starts with (Config.Formation), before use.
func (f *Formation) Init(id string) {
	if id != "" {
		f.id.Store(&id)
	}
}

// ID returns the formation id ("" if none yet).
func (f *Formation) ID() string {
	if p := f.id.Load(); p != nil {
		return *p
	}
	return ""
}

// Gen counts the times the id was set after Init.
func (f *Formation) Gen() uint64 { return f.gen.Load() }

// Set records the formation id once the node has persisted it. Setting the
// id it already has is a no-op; any other change is refused with
// ErrFormationMismatch.
func (f *Formation) Set(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.setLocked(id)
}

func (f *Formation) setLocked(id string) error {
	switch cur := f.ID(); {
	case cur == id:
		return nil
	case cur != "":
		return ErrFormationMismatch
	}
	f.id.Store(&id)
	f.gen.Add(1)
	return nil
}

// Verdict is the formation check of an RPC's headers, which must not
// block: it accepts or refuses, except that an adoption is left to Check,
// before the RPC's first message is read: adopt is then the id to adopt.
func (f *Formation) Verdict(from uint64, rpc, remote, remoteDetail string, raftTraffic bool) (adopt string, err error) {
	local := f.ID()
	switch {
	case remote == local:
		return "", nil
	case remote == "":
		if !raftTraffic || local == "" {
			return "", nil
		}
	case local == "":
		if !raftTraffic || f.Adopt == nil {
			return "", nil
		}
		return remote, nil
	}
	return "", f.reject(from, rpc, local, remote, remoteDetail)
}

// Check is the whole formation check of an RPC from peer from, adoption
// included. raftTraffic is true for streams and snapshots.
func (f *Formation) Check(from uint64, rpc, remote, remoteDetail string, raftTraffic bool) error {
	local := f.ID()
	switch {
	case remote == local:
		return nil
	case remote == "":
		if !raftTraffic || local == "" {
			return nil
		}
		return f.reject(from, rpc, local, remote, remoteDetail)
	case local == "":
		if !raftTraffic || f.Adopt == nil {
			return nil
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if local = f.ID(); local == remote {
			return nil // adopted meanwhile by another RPC
		}
		if local == "" {
			if err := f.Adopt(remote); err != nil {
				f.Log.Warn(f.Name+": cannot join the formed cluster of a peer", "rpc", rpc, "from", views.MemberID(from),
					"remote_formation", remote, "err", err)
				return f.mismatch(fmt.Sprintf("%s: local none, remote %q: %v", FormationMismatchMsg, remote, err))
			}
			if err := f.setLocked(remote); err != nil {
				return status.Errorf(codes.Internal, "formation: %v", err)
			}
			f.Log.Info(f.Name+": joined a formed cluster", "formation", remote, "from", views.MemberID(from))
			return nil
		}
	}
	return f.reject(from, rpc, local, remote, remoteDetail)
}

// reject tells OnForeign (or the log) once per (peer, formation) and
// returns the PermissionDenied status.
func (f *Formation) reject(from uint64, rpc, local, remote, remoteDetail string) error {
	key := views.MemberID(from).String() + "/" + remote
	if _, seen := f.logged.LoadOrStore(key, true); !seen {
		if on := f.OnForeign; on != nil && remote != "" {
			if len(remoteDetail) > MaxFormationDetail {
				remoteDetail = ""
			}
			on(from, remoteDetail, false) // the node says it, with what it knows
		} else {
			f.Log.Warn(f.Name+": rejected a peer of another formed cluster; it is ignored from now on",
				"rpc", rpc, "from", views.MemberID(from), "local_formation", local, "remote_formation", remote)
		}
	}
	return f.mismatch(fmt.Sprintf("%s: local %q, remote %q", FormationMismatchMsg, local, remote))
}

// mismatch is the PermissionDenied status of msg, with this node's Detail.
func (f *Formation) mismatch(msg string) error {
	if f.Detail != "" {
		msg += FormationDetailSep + f.Detail
	}
	return status.Error(codes.PermissionDenied, msg)
}
