package fleet

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

var (
	errOlder       = errors.New("older members")
	errUnavailable = errors.New("unavailable")
)

// fakeHost is a node as the unit tests need it: its loop runs a Do at once,
// TryDo only counts, and everything else is a field.
type fakeHost struct {
	lead       Leadership
	conf       *raftpb.ConfState
	status     raft.Status
	applied    uint64
	proposed   []*raftpb.ConfChangeV2
	proposeErr error
	reads      [][]byte
	peers      []raft.Peer // bootstrapped with
	wakes      int         // TryDo calls
	leader     uint64
	closing    bool
	hasData    bool
	session    bool
	persisted  []string
	files      map[string]string
	net        *fakeNet
}

func (h *fakeHost) Leadership() Leadership               { return h.lead }
func (h *fakeHost) ConfState() *raftpb.ConfState         { return h.conf }
func (h *fakeHost) Status() raft.Status                  { return h.status }
func (h *fakeHost) Applied() uint64                      { return h.applied }
func (h *fakeHost) ReadIndex(rctx []byte)                { h.reads = append(h.reads, rctx) }
func (h *fakeHost) Bootstrap(peers []raft.Peer) error    { h.peers = peers; return nil }
func (h *fakeHost) Do(_ context.Context, f func()) error { f(); return nil }
func (h *fakeHost) TryDo(func())                         { h.wakes++ }
func (h *fakeHost) Leader() uint64                       { return h.leader }
func (h *fakeHost) LeaderChanged() <-chan struct{}       { return nil }
func (h *fakeHost) Closing() bool                        { return h.closing }
func (h *fakeHost) HasData() bool                        { return h.hasData }
func (h *fakeHost) SessionOpen() bool                    { return h.session }
func (h *fakeHost) PersistFormation(id string) error {
	h.persisted = append(h.persisted, id)
	return nil
}
func (h *fakeHost) Net() Network { return h.net }
func (h *fakeHost) WriteFile(name string, data []byte) error {
	h.files[name] = string(data)
	return nil
}
func (h *fakeHost) ProposeConfChange(cc *raftpb.ConfChangeV2) error { return h.propose(cc) }

func (h *fakeHost) propose(cc *raftpb.ConfChangeV2) error {
	if h.proposeErr != nil {
		return h.proposeErr
	}
	h.proposed = append(h.proposed, cc)
	return nil
}

// fakeNet records what a Fleet asks of the transport. Calls it does not
// implement panic (the nil Caller).
type fakeNet struct {
	transport.Caller
	peers     map[uint64]string
	versions  map[uint64]string
	formation string
	removed   chan *transportpb.RemovedRequest
	roles     map[uint64]transport.Role // PeerRole; absent: PlaintextRole
	revoked   []uint64
}

func (n *fakeNet) AddPeer(id uint64, addr string) { n.peers[id] = addr }
func (n *fakeNet) PeerVersion(id uint64) (string, bool) {
	v, ok := n.versions[id]
	return v, ok
}
func (n *fakeNet) SetFormation(id string) error { n.formation = id; return nil }
func (n *fakeNet) PeerRole(id uint64) (transport.Role, bool) {
	if r, ok := n.roles[id]; ok {
		return r, true
	}
	return transport.PlaintextRole, true
}
func (n *fakeNet) Revoke(id uint64) { n.revoked = append(n.revoked, id) }
func (n *fakeNet) Removed(_ context.Context, _ uint64, req *transportpb.RemovedRequest) (*transportpb.RemovedResponse, error) {
	n.removed <- req
	return &transportpb.RemovedResponse{}, nil
}

// newTestFleet makes node 1's Fleet over a fakeHost; with gossip its member
// list is *members.
func newTestFleet(t *testing.T, g *membership.Config, static []Member, members *[]membership.Member) (*Fleet, *fakeHost) {
	t.Helper()
	h := &fakeHost{conf: &raftpb.ConfState{}, files: map[string]string{},
		net: &fakeNet{peers: map[uint64]string{}, versions: map[uint64]string{}, removed: make(chan *transportpb.RemovedRequest, 16)}}
	f := New(Config{ID: 1, ClusterID: "c", Version: "lockraft/0.2", Gossip: g, Static: static,
		ElectionTimeout: time.Second, TickInterval: 100 * time.Millisecond, RetryInterval: 100 * time.Millisecond,
		ErrOlderMembers: errOlder, ErrUnavailable: errUnavailable, Now: time.Now,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Host: h})
	if members != nil {
		f.list = func() []membership.Member { return *members }
	}
	return f, h
}

// progress is a leader's raft progress: each id caught up to match.
func progress(match uint64, voters []uint64, learners ...uint64) map[uint64]tracker.Progress {
	p := map[uint64]tracker.Progress{}
	for _, id := range voters {
		p[id] = tracker.Progress{Match: match, RecentActive: true}
	}
	for _, id := range learners {
		p[id] = tracker.Progress{Match: match, RecentActive: true, IsLearner: true}
	}
	return p
}

func member(id uint64, state membership.State, hasData bool, formation string) membership.Member {
	return membership.Member{Name: "m" + string(rune('0'+id)), State: state,
		Meta: membership.Meta{RaftID: id, RaftAddr: "addr" + string(rune('0'+id)), ClusterID: "c", HasData: hasData, Formation: formation}}
}
