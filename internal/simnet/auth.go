package simnet

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockraft/lockraft/internal/netrules"
	"github.com/lockraft/lockraft/internal/views"
)

// The receiver's checks, as transport's server makes them, with the same
// rules (package netrules: Receiver.Admit, RemoteMessageOK, Formation).
// The sender is who it says: there is no TLS, as in transport's plaintext
// mode; its role is its endpoint's Config.Role (PlaintextRole if zero), as
// its certificate would say.
// The status messages are transport's, so that the caller's mapping
// (netrules.ClientError) tells a cluster mismatch from a formation mismatch
// from another refusal as transport's client does.

// Refusal kinds, as transport counts them (Refusals).
const (
	refusedRPC      = netrules.RefusedRPC
	refusedMessage  = netrules.RefusedMessage
	refusedSnapshot = netrules.RefusedSnapshot
)

// authenticate checks what arrives at e from from: its cluster id,
// revocation, for raft traffic (a stream's messages or a snapshot) the
// sender's role (voters only) and Config.AdmitRaft, then its formation id
// (raft traffic may make e adopt the sender's formation), and records the
// sender's version.
// It returns the status error the sender sees. It runs e's AdoptFormation
// and OnForeignPeer, so the caller holds e (enterLocked).
func (e *Endpoint) authenticate(from uint64, rpc string, env envelope, raftTraffic bool) error {
	if err := e.recv.Admit(rpc, from, env.role, env.cluster, raftTraffic); err != nil {
		return err
	}
	if err := e.form.Check(from, rpc, env.formation, env.detail, raftTraffic); err != nil {
		return err
	}
	e.n.mu.Lock()
	e.versions[from] = env.version
	e.n.mu.Unlock()
	return nil
}

// streamRefused is the sender's side of a refused raft stream (transport's
// peer.streamFailed): a formation mismatch is said once per peer, through
// OnForeignPeer when set; another refusal is logged. The caller then reports
// the peer unreachable. The caller holds e.
func (e *Endpoint) streamRefused(peer uint64, err error) {
	detail, foreign := netrules.ForeignRefusal(err)
	switch {
	case foreign:
		e.n.mu.Lock()
		said := e.foreign[peer]
		e.foreign[peer] = true
		e.n.mu.Unlock()
		if said {
			return
		}
		if f := e.cfg.OnForeignPeer; f != nil {
			f(peer, detail, true)
		} else {
			e.log.Warn("simnet: peer belongs to another formed cluster; not sending to it", "peer", views.MemberID(peer), "err", err)
		}
	case status.Code(err) == codes.PermissionDenied:
		e.log.Warn("simnet: peer rejected stream", "peer", views.MemberID(peer), "err", err)
	default:
		e.log.Debug("simnet: stream to peer failed", "peer", views.MemberID(peer), "err", err)
	}
}
