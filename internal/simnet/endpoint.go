package simnet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/internal/netrules"
	"github.com/lockraft/lockraft/internal/refuse"
	"github.com/lockraft/lockraft/transport"
)

// Endpoint is one node's place on a Network: a transport.Network. Its
// Handler's Receive, AcceptSnapshot, ReportUnreachable and ReportSnapshot,
// and its Config's AdoptFormation and OnForeignPeer, run on the network's
// delivery goroutine, one at a time across the whole network, so they must
// not wait for the network (as the Handler contract says, they may not
// block for long; they may Send); ReceiveSnapshot and the Calls run on
// goroutines of their own, as on a gRPC server.
type Endpoint struct {
	n       *Network
	id      uint64
	role    transport.Role // cfg.Role, or PlaintextRole
	cfg     transport.Config
	log     *slog.Logger
	refused *refuse.Log

	// ctx is cancelled by Close: it ends the endpoint's pending calls and
	// the contexts of the calls and snapshots it serves.
	ctx    context.Context
	cancel context.CancelFunc
	// busy counts Handler methods and Config callbacks running for this
	// endpoint; Close waits for them.
	busy      sync.WaitGroup
	closeOnce sync.Once

	recv netrules.Receiver  // the checks of every sender (auth.go)
	form netrules.Formation // the formation id and its check (auth.go)

	// Guarded by Network.mu.
	closed        bool
	peers         map[uint64]string
	versions      map[uint64]string
	revoked       map[uint64]bool // Revoke
	foreign       map[uint64]bool // peers found to be of another formation (sender side)
	receivingSnap bool            // one snapshot is received at a time
}

// newEndpoint validates cfg as transport's Config.validate does, prepares
// the snapshot directory and makes the endpoint (not yet registered).
func newEndpoint(n *Network, cfg transport.Config) (*Endpoint, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{transport.ErrInvalidConfig}, args...)...)
	}
	switch {
	case cfg.ClusterID == "":
		return nil, bad("ClusterID is empty")
	case cfg.LocalID == 0:
		return nil, bad("LocalID is 0")
	case len(cfg.FormationDetail) > netrules.MaxFormationDetail:
		return nil, bad("FormationDetail longer than %d bytes", netrules.MaxFormationDetail)
	case cfg.SnapshotDir == "":
		return nil, bad("SnapshotDir is empty")
	case cfg.Handler == nil:
		return nil, bad("Handler is nil")
	case cfg.MaxSnapshotSize < 0:
		return nil, bad("MaxSnapshotSize %d < 0", cfg.MaxSnapshotSize)
	case transport.ReservedID(cfg.LocalID):
		return nil, bad("LocalID %016x is reserved", cfg.LocalID)
	}
	if cfg.MaxSnapshotSize == 0 {
		cfg.MaxSnapshotSize = transport.DefaultMaxSnapshotSize
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if err := os.MkdirAll(cfg.SnapshotDir, 0o700); err != nil {
		return nil, fmt.Errorf("simnet: snapshot dir: %w", err)
	}
	if err := netrules.RemoveSnapshotTemps(cfg.SnapshotDir); err != nil {
		return nil, fmt.Errorf("simnet: snapshot dir: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Endpoint{
		n:        n,
		id:       cfg.LocalID,
		cfg:      cfg,
		log:      cfg.Logger,
		refused:  refuse.New(cfg.Logger, cfg.RefuseEvery),
		ctx:      ctx,
		cancel:   cancel,
		peers:    make(map[uint64]string),
		versions: make(map[uint64]string),
		revoked:  make(map[uint64]bool),
		foreign:  make(map[uint64]bool),
		form: netrules.Formation{
			Adopt:     cfg.AdoptFormation,
			Detail:    cfg.FormationDetail,
			OnForeign: cfg.OnForeignPeer,
			Log:       cfg.Logger,
			Name:      "simnet",
		},
	}
	e.recv = netrules.Receiver{ClusterID: cfg.ClusterID, Revoked: e.isRevoked, AdmitRaft: cfg.AdmitRaft, Refused: e.refused}
	e.form.Init(cfg.Formation)
	if e.role = cfg.Role; e.role == 0 {
		e.role = transport.PlaintextRole
	}
	return e, nil
}

// ID is the endpoint's node id.
func (e *Endpoint) ID() uint64 { return e.id }

// Addr is Addr(id).
func (e *Endpoint) Addr() string { return Addr(e.id) }

// AddPeer makes peer id reachable at addr. An addr other than Addr(id) is
// an address where id does not listen: messages to id are then dropped
// and reported unreachable, calls fail with codes.Unavailable.
// Greet does nothing: the simulated network has no redial backoff for a
// greeting to cut short (doc.go).
func (e *Endpoint) Greet(uint64) {}

func (e *Endpoint) AddPeer(id uint64, addr string) {
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	if e.closed || id == e.id {
		return
	}
	e.peers[id] = addr
}

// RemovePeer forgets peer id, as transport's RemovePeer.
func (e *Endpoint) RemovePeer(id uint64) {
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	delete(e.peers, id)
}

// Formation is the endpoint's formation id ("" if none yet).
func (e *Endpoint) Formation() string { return e.form.ID() }

// SetFormation sets the formation id once, as transport's SetFormation:
// setting the id it has is a no-op, any other change is refused with
// transport.ErrFormationMismatch. Messages sent from now on carry it.
func (e *Endpoint) SetFormation(id string) error { return e.form.Set(id) }

// isRevoked reports whether Revoke refused id.
func (e *Endpoint) isRevoked(id uint64) bool {
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	return e.revoked[id]
}

// PeerVersion is the Version of the endpoint of peer that last sent this
// one something that passed the receiver's checks, and whether anything
// has.
func (e *Endpoint) PeerVersion(peer uint64) (string, bool) {
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	v, ok := e.versions[peer]
	return v, ok
}

// PeerRole is the role of the endpoint last started under id (its
// Config.Role; PlaintextRole if zero), and whether one was.
func (e *Endpoint) PeerRole(id uint64) (transport.Role, bool) {
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	r, ok := e.n.roles[id]
	return r, ok
}

// Revoke refuses member id from now on, as transport's: whatever arrives
// from it (raft messages, snapshots, calls, including those on their way)
// is refused with codes.PermissionDenied. Calls to it still work.
func (e *Endpoint) Revoke(id uint64) {
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	e.revoked[id] = true
}

// Refuse, Note and Refusals are the endpoint's refusal log, as transport's.
func (e *Endpoint) Refuse(kind, source string, attrs ...any) {
	e.refused.Refuse(kind, source, attrs...)
}

func (e *Endpoint) Note(kind, source string, attrs ...any) { e.refused.Note(kind, source, attrs...) }

func (e *Endpoint) Refusals(kind string) uint64 { return e.refused.Count(kind) }

// Close takes the endpoint off the network and waits for its Handler
// methods to return (those served on their own goroutines are cancelled
// first): once it returns, no Handler method of this endpoint is called
// again. What it sent that has not arrived is lost, its pending calls
// return transport.ErrClosed, and messages to its id are dropped until an
// endpoint is started again under it. Close must not be called from one of
// the endpoint's Handler methods. Idempotent; returns nil.
func (e *Endpoint) Close() error {
	e.closeOnce.Do(func() {
		n := e.n
		n.mu.Lock()
		e.closed = true
		if n.endpoints[e.id] == e {
			delete(n.endpoints, e.id)
		}
		n.mu.Unlock()
		e.cancel()
		e.busy.Wait()
	})
	return nil
}

// envelope is what a sender's headers carry with every message, transfer
// and call: checked by the receiver's authenticate.
type envelope struct {
	role      transport.Role // the sender's, as its certificate would say
	cluster   string
	formation string
	detail    string // FormationDetail; sent with raft messages only
	version   string
}

func (e *Endpoint) envelope(raft bool) envelope {
	env := envelope{role: e.role, cluster: e.cfg.ClusterID, formation: e.Formation(), version: e.cfg.Version}
	if raft {
		env.detail = e.cfg.FormationDetail
	}
	return env
}

// Send queues a deep copy of each message for its destination and returns
// at once. A message to an id not added with AddPeer is dropped and its id
// reported unreachable (for MsgSnap also ReportSnapshot(to, failed)), once
// per id per Send; the reports come from the delivery goroutine, as every
// Handler call does. MsgSnap reads its file (SnapshotPath(SnapshotDir,
// index)) now and travels as a transfer of its own. After Close, Send
// drops silently. Messages of one Send to one destination keep their order.
func (e *Endpoint) Send(msgs []*raftpb.Message) {
	if len(msgs) == 0 {
		return
	}
	files := make(map[int]snapFile)
	for i, m := range msgs {
		if m.GetType() == raftpb.MessageType_MsgSnap {
			files[i] = readSnapshot(e.cfg.SnapshotDir, m)
		}
	}
	n := e.n
	now := time.Now()
	n.mu.Lock()
	if e.closed || n.closed {
		n.mu.Unlock()
		return
	}
	env := e.envelope(true)
	var unknown []uint64
	seen := make(map[uint64]bool)
	for i, m := range msgs {
		to := m.GetTo()
		addr, known := e.peers[to]
		if !known {
			if m.GetType() == raftpb.MessageType_MsgSnap {
				n.scheduleSnapReportLocked(now, e, to, n.linkLocked(e.id, to, chSnap).next(),
					proto.Clone(m).(*raftpb.Message), "unknown peer")
			}
			if !seen[to] {
				seen[to] = true
				unknown = append(unknown, to)
			}
			continue
		}
		if m.GetType() == raftpb.MessageType_MsgSnap {
			n.sendSnapshotLocked(now, e, m, addr, files[i])
			continue
		}
		for _, ev := range n.scheduleRaftLocked(now, e.id, to, raftChannel(m.GetType())) {
			ev.src, ev.env = e, env
			ev.msg = proto.Clone(m).(*raftpb.Message)
			if ev.lost == "" && addr != Addr(to) {
				ev.lost = lostAddress
			}
			n.scheduleLocked(ev)
		}
	}
	for _, to := range unknown {
		n.scheduleLocked(&event{at: now, from: e.id, to: to, ch: chUnreachable,
			seq: n.linkLocked(e.id, to, chRaft).next(), kind: evUnreachable, src: e, why: "unknown peer"})
	}
	n.mu.Unlock()
	n.poke()
}

// Why an event was lost on the way.
const (
	lostPolicy   = "dropped by the link's policy"
	lostAddress  = "no endpoint at the peer's address"
	lostCut      = "link cut"
	lostNoNode   = "no endpoint"
	lostSender   = "sender closed"
	lostReturned = "answer lost: return link cut"
)
