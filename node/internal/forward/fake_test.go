package forward

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// A fake node for the forwarding state: the loop and the helper
// goroutines are queues the test runs (settle), so every step is
// deterministic; the network records each call and answers from the test's
// functions.

const (
	self     = 1
	leaderID = 2
	lightID  = 9 // a light member (not in the configuration)
	retry    = 100 * time.Millisecond
	ttl      = 2 * time.Second // WaitCheck: 500 ms
)

var t0 = time.Unix(1000, 0)

type call struct {
	method string
	to     uint64
	req    any
}

type fakeNet struct {
	transport.Caller // the calls forwarding does not make: nil
	calls            []call
	propose          func(to uint64, req *transportpb.FwdProposeRequest) (*transportpb.FwdProposeResponse, error)
	open             func(to uint64, req *transportpb.FwdOpenRequest) (*transportpb.FwdOpenResponse, error)
	status           func(to uint64, req *transportpb.FwdStatusRequest) (*transportpb.FwdStatusResponse, error)
	observe          func(to uint64, req *transportpb.ObserveRequest) (*transportpb.ObserveResponse, error)
}

// fakeCall records a call and answers it with answer, or where that is nil
// with def and defErr.
func fakeCall[Req, Resp any](f *fakeNet, method string, to uint64, req Req, answer func(uint64, Req) (Resp, error),
	def Resp, defErr error) (Resp, error) {
	f.calls = append(f.calls, call{method, to, req})
	if answer == nil {
		return def, defErr
	}
	return answer(to, req)
}

func (f *fakeNet) FwdPropose(_ context.Context, to uint64, req *transportpb.FwdProposeRequest) (*transportpb.FwdProposeResponse, error) {
	return fakeCall(f, "FwdPropose", to, req, f.propose, &transportpb.FwdProposeResponse{}, nil)
}

func (f *fakeNet) FwdOpen(_ context.Context, to uint64, req *transportpb.FwdOpenRequest) (*transportpb.FwdOpenResponse, error) {
	return fakeCall(f, "FwdOpen", to, req, f.open, nil, errors.New("unreachable"))
}

func (f *fakeNet) FwdPush(_ context.Context, to uint64, req *transportpb.FwdPushRequest) (*transportpb.FwdPushResponse, error) {
	return fakeCall(f, "FwdPush", to, req, nil, &transportpb.FwdPushResponse{}, nil)
}

func (f *fakeNet) FwdStatus(_ context.Context, to uint64, req *transportpb.FwdStatusRequest) (*transportpb.FwdStatusResponse, error) {
	return fakeCall(f, "FwdStatus", to, req, f.status, &transportpb.FwdStatusResponse{}, nil)
}

func (f *fakeNet) Observe(_ context.Context, to uint64, req *transportpb.ObserveRequest) (*transportpb.ObserveResponse, error) {
	return fakeCall(f, "Observe", to, req, f.observe, &transportpb.ObserveResponse{}, nil)
}

// take returns the calls made so far and forgets them.
func (f *fakeNet) take() []call {
	c := f.calls
	f.calls = nil
	return c
}

type fakeTable struct {
	applied  uint64
	sessions []lockfsm.SessionInfo
	locks    map[string]lockfsm.LockInfo
	leaders  map[string]lockfsm.LeaderInfo
}

func (t *fakeTable) AppliedIndex() uint64            { return t.applied }
func (t *fakeTable) Sessions() []lockfsm.SessionInfo { return t.sessions }
func (t *fakeTable) Lock(name string) (lockfsm.LockInfo, bool) {
	l, ok := t.locks[name]
	return l, ok
}
func (t *fakeTable) Leader(name string) (lockfsm.LeaderInfo, bool) {
	l, ok := t.leaders[name]
	return l, ok
}

type relearn struct {
	seq uint64
	res lockfsm.Result
}

type watchState struct {
	known bool
	chain uint64
}

type fakeHost struct {
	t     testing.TB
	light bool
	// leader: the loop's; seen: as published; raft: raft's own.
	leader, seen, raft uint64
	members            []membership.Member
	setLeader          []uint64

	session  uint64
	opened   [][2]uint64 // nonce, session
	inflight map[uint64]Op
	queued   map[uint64]Op
	relearnt []relearn
	events   []lockfsm.Event
	answers  int
	pushed   [][]*transportpb.PushItem

	watched   map[string]*watchState
	delivered []Change
	lagged    []string

	ready    bool
	config   map[uint64]bool
	refuse   map[string]error // CheckForwarded: by command name
	unknown  map[uint64]bool  // CheckForwarded: sessions not known yet
	admit    error
	proposed []lockfsm.Command
	notYours map[uint64]bool
	open     map[uint64]bool

	goes []func()
	loop []func()
}

func newFakeHost(t testing.TB) *fakeHost {
	return &fakeHost{t: t, inflight: map[uint64]Op{}, queued: map[uint64]Op{}, watched: map[string]*watchState{},
		config: map[uint64]bool{self: true, leaderID: true, 3: true}, refuse: map[string]error{},
		unknown: map[uint64]bool{}, notYours: map[uint64]bool{}, open: map[uint64]bool{}}
}

func (h *fakeHost) Go(f func())    { h.goes = append(h.goes, f) }
func (h *fakeHost) Do(f func())    { h.loop = append(h.loop, f) }
func (h *fakeHost) TryDo(f func()) { h.loop = append(h.loop, f) }
func (h *fakeHost) Light() bool    { return h.light }
func (h *fakeHost) Leader() uint64 { return h.leader }

func (h *fakeHost) SeenLeader() uint64 { return h.seen }
func (h *fakeHost) RaftLeader() uint64 { return h.raft }
func (h *fakeHost) SetLeader(id uint64) {
	h.leader, h.seen = id, id
	h.setLeader = append(h.setLeader, id)
}
func (h *fakeHost) Members() []membership.Member { return h.members }

func (h *fakeHost) Session() uint64 { return h.session }
func (h *fakeHost) SessionOpened(nonce, session uint64) {
	h.opened = append(h.opened, [2]uint64{nonce, session})
}
func (h *fakeHost) EachQueued(f func(Op)) {
	for _, o := range h.queued {
		f(o)
	}
}
func (h *fakeHost) EachInflight(f func(Op)) {
	for _, o := range h.inflight {
		f(o)
	}
}
func (h *fakeHost) Inflight(seq uint64) (Op, bool) { o, ok := h.inflight[seq]; return o, ok }
func (h *fakeHost) Queued(seq uint64) (Op, bool)   { o, ok := h.queued[seq]; return o, ok }
func (h *fakeHost) Relearned(seq uint64, res lockfsm.Result) {
	delete(h.inflight, seq)
	h.relearnt = append(h.relearnt, relearn{seq, res})
}
func (h *fakeHost) StatusEvent(ev *lockfsm.Event) { h.events = append(h.events, *ev) }
func (h *fakeHost) StatusAnswered(uint64, []uint64, []*transportpb.StatusFact) {
	h.answers++
}
func (h *fakeHost) Pushed(items []*transportpb.PushItem) { h.pushed = append(h.pushed, items) }

func (h *fakeHost) EachWatched(f func(string, bool, uint64)) {
	for name, w := range h.watched {
		f(name, w.known, w.chain)
	}
}
func (h *fakeHost) Watched(name string) (bool, uint64, bool) {
	w := h.watched[name]
	if w == nil {
		return false, 0, false
	}
	return w.known, w.chain, true
}
func (h *fakeHost) Deliver(c Change) {
	h.delivered = append(h.delivered, c)
	if w := h.watched[c.Name]; w != nil {
		w.known, w.chain = true, max(w.chain, c.Index)
	}
}
func (h *fakeHost) Known(name string, chain uint64) {
	if w := h.watched[name]; w != nil {
		w.known, w.chain = true, max(w.chain, chain)
	}
}
func (h *fakeHost) Lagged(name string) {
	h.lagged = append(h.lagged, name)
	delete(h.watched, name)
}

func (h *fakeHost) Ready() bool             { return h.ready }
func (h *fakeHost) InConfig(id uint64) bool { return h.config[id] }
func (h *fakeHost) CheckForwarded(_ uint64, data []byte) (lockfsm.Command, bool, error) {
	cmd, err := lockfsm.DecodeCommand(data)
	if err != nil {
		return cmd, false, err
	}
	if err := h.refuse[cmd.Name]; err != nil {
		return cmd, false, err
	}
	return cmd, !h.unknown[cmd.Session], nil
}
func (h *fakeHost) Admit([]byte) error { return h.admit }
func (h *fakeHost) Propose(data []byte) {
	cmd, err := lockfsm.DecodeCommand(data)
	if err != nil {
		h.t.Fatalf("proposed an undecodable command: %v", err)
	}
	cmd.Version = 0 // the encoding's, not the command's
	h.proposed = append(h.proposed, cmd)
}
func (h *fakeHost) CheckOwner(_, session uint64) error {
	if h.notYours[session] {
		return errNotYours
	}
	return nil
}
func (h *fakeHost) SessionOpen(session uint64) bool { return h.open[session] }

var errNotYours = errors.New("not yours")

// settle runs the helper goroutines' work and the loop's until neither has
// any left.
func (h *fakeHost) settle() {
	for len(h.goes)+len(h.loop) > 0 {
		for len(h.goes) > 0 {
			f := h.goes[0]
			h.goes = h.goes[1:]
			f()
		}
		for len(h.loop) > 0 {
			f := h.loop[0]
			h.loop = h.loop[1:]
			f()
		}
	}
}

var errOlder = errors.New("older members")

func errCode(err error) uint32 {
	if errors.Is(err, errOlder) {
		return 254
	}
	return uint32(lockfsm.ErrorCode(err))
}

// fixture is a forwarding state on a fake node.
type fixture struct {
	s     *State
	h     *fakeHost
	net   *fakeNet
	table *fakeTable
	stop  chan struct{}
}

func newFixture(t testing.TB) *fixture {
	f := &fixture{h: newFakeHost(t), net: &fakeNet{}, table: &fakeTable{locks: map[string]lockfsm.LockInfo{},
		leaders: map[string]lockfsm.LeaderInfo{}}, stop: make(chan struct{})}
	f.s = New(Config{ID: self, RetryInterval: retry, SessionTTL: ttl, Net: f.net, Table: f.table, ErrCode: errCode,
		Stop: f.stop}, f.h)
	return f
}

// lightMember makes the fake node a light member that follows leaderID.
func (f *fixture) lightMember() *fixture {
	f.h.light = true
	f.h.leader, f.h.seen = leaderID, leaderID
	f.h.config = map[uint64]bool{leaderID: true, 3: true, 4: true}
	f.h.session = 77
	return f
}

// leading makes the fake node a ready leader.
func (f *fixture) leading() *fixture {
	f.h.leader, f.h.seen, f.h.ready = self, self, true
	f.s.BecomeLeader()
	return f
}

func enc(c lockfsm.Command) []byte { return c.AppendEncode(nil) }
