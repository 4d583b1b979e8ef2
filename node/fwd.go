package node

// Light members (membership/doc.go, "Fleet scale") work through the leader:
// they forward their commands, learn results and events by pushes or by
// asking, and observe elections from it; the leader serves them. What is
// forwarded, retried, pushed and caught up is package forward's
// (node/internal/forward, whose doc tells the whole story). This file is
// the node's side of it: the Host it implements (fwdHost), the calls it
// serves, and the error codes of pushed results.

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/node/internal/forward"
	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// forwardConfig is the forwarding state's configuration: the node's, its
// network, its lock table and its stop channel.
func (c Config) forwardConfig(net transport.Network, table *lockfsm.FSM, stop <-chan struct{}) forward.Config {
	fc := forward.Config{ID: c.ID, RetryInterval: c.RetryInterval, SessionTTL: c.SessionTTL,
		Net: net, Table: table, ErrCode: errCode, Stop: stop}
	if m := c.Metrics; m != nil && m.Forward != nil {
		fc.Forwarded = m.Forward
	}
	return fc
}

// light reports whether this node is a light member: gossip, no raft state.
func (n *Node) light() bool { return n.ml != nil && !n.storage.HasState() }

// ---- the calls a leader serves, and the pushes a light member takes ----

// FwdOpen serves a light member's request to open its session: the session
// is always the caller's own (Node = its authenticated id), with a TTL of at
// most maxSessionTTL, within its quota of sessions, and in a static cluster
// only for a member of the list (privilege.Quotas).
func (h *transportHandler) FwdOpen(ctx context.Context, from uint64, req *transportpb.FwdOpenRequest) (*transportpb.FwdOpenResponse, error) {
	n := (*Node)(h)
	if !validTTL(req.GetTtlMillis()) {
		return nil, n.refuseCall(from, "FwdOpen", fmt.Errorf("%w: %d ms", errBadTTL, req.GetTtlMillis()))
	}
	reply := make(chan *transportpb.FwdOpenResponse, 1)
	fail := make(chan error, 1)
	nonce, ttl := req.GetNonce(), req.GetTtlMillis()
	resp, err := awaitLoop(ctx, n, reply, func() {
		if err := n.quota.AdmitOpen(from, n.fsm); err != nil {
			fail <- err
			reply <- nil
			return
		}
		n.fwd.OpenOnLeader(from, nonce, ttl, n.clock.Now(), reply)
	})
	select {
	case err := <-fail:
		return nil, n.refuseCall(from, "FwdOpen", err)
	default:
	}
	return resp, err
}

// FwdPropose serves a light member's forwarded commands. Every command must
// be one the member may issue, of a session of its own (authorise); one
// that is not refuses the whole call.
func (h *transportHandler) FwdPropose(ctx context.Context, from uint64, req *transportpb.FwdProposeRequest) (*transportpb.FwdProposeResponse, error) {
	n := (*Node)(h)
	cmds := req.GetCommands()
	return awaitRefusable(ctx, n, from, "FwdPropose", func(reply chan *transportpb.FwdProposeResponse) error {
		return n.fwd.ProposeOnLeader(from, cmds, n.clock.Now(), reply)
	})
}

// FwdPush serves results and events pushed to this light member; only the
// leader it follows may push (see below for a member looking for its
// leader).
func (h *transportHandler) FwdPush(ctx context.Context, from uint64, req *transportpb.FwdPushRequest) (*transportpb.FwdPushResponse, error) {
	n := (*Node)(h)
	if n.k.PushesDropped() {
		return nil, errors.New("lockraft: push dropped (test)")
	}
	// From the leader this member follows; while it knows none (a call
	// failed, it is looking), from a member with raft data, the only kind
	// that can lead. Never from a light member or a stranger.
	if lead := n.lead.Load(); from != lead && (lead != 0 || !n.members.Allows(from)) {
		return nil, n.refuseCall(from, "FwdPush", fmt.Errorf("%w: push from %016x, the leader is %016x", transport.ErrPermissionDenied, from, lead))
	}
	items := req.GetItems()
	if err := n.do(ctx, func() { (*fwdHost)(n).onPush(items) }); err != nil {
		return nil, err
	}
	return &transportpb.FwdPushResponse{}, nil
}

// FwdStatus serves a light member's question about its own acquires.
func (h *transportHandler) FwdStatus(ctx context.Context, from uint64, req *transportpb.FwdStatusRequest) (*transportpb.FwdStatusResponse, error) {
	n := (*Node)(h)
	n.statusServed.Add(1)
	return awaitRefusable(ctx, n, from, "FwdStatus", func(reply chan *transportpb.FwdStatusResponse) error {
		r, err := n.fwd.ServeStatus(from, req)
		if err == nil {
			reply <- r
		}
		return err
	})
}

// Observe serves a light member's subscription to elections: each name's
// changes after the member's chain index (or its current state), and a
// subscription to the later ones. Read-only: it reveals what every
// member's lock table holds anyway. Names are checked as lockfsm checks
// them; a request naming an invalid one is refused.
func (h *transportHandler) Observe(ctx context.Context, from uint64, req *transportpb.ObserveRequest) (*transportpb.ObserveResponse, error) {
	n := (*Node)(h)
	for _, q := range req.GetNames() {
		if name := q.GetName(); name == "" || len(name) > lockfsm.MaxNameLen {
			return nil, fmt.Errorf("%w: election name of %d bytes", transport.ErrInvalidRequest, len(name))
		}
	}
	reply := make(chan *transportpb.ObserveResponse, 1)
	return awaitReply(ctx, n, reply, n.do(ctx, func() { reply <- n.fwd.ServeObserve(from, req, n.clock.Now()) }), nil)
}

// awaitRefusable runs serve in the loop and waits for the answer it sends
// on reply (awaitLoop); an error serve returns instead refuses the call
// from the member (refuseCall, as method).
func awaitRefusable[T any](ctx context.Context, n *Node, from uint64, method string, serve func(reply chan T) error) (T, error) {
	reply := make(chan T, 1)
	fail := make(chan error, 1)
	resp, err := awaitLoop(ctx, n, reply, func() {
		if err := serve(reply); err != nil {
			fail <- err
			var zero T
			reply <- zero
		}
	})
	select {
	case err := <-fail:
		var zero T
		return zero, n.refuseCall(from, method, err)
	default:
	}
	return resp, err
}

// awaitLoop runs f in the loop and waits for what it sends on reply
// (lockerr.ErrClosed if the node stops first).
func awaitLoop[T any](ctx context.Context, n *Node, reply chan T, f func()) (T, error) {
	return awaitReply(ctx, n, reply, n.do(ctx, f), func() error { return lockerr.ErrClosed })
}

// ---- push items' error codes ----

// Errors in pushed results travel as lockfsm's stable one-byte codes
// (lockfsm.ErrorCode), plus codeOlderMembers: the leader's version gate
// refused a forwarded catalogue command (versiongate.go). A code this
// version does not know reads as errForwarded.
const codeOlderMembers = 254

func errCode(err error) uint32 {
	if errors.Is(err, lockerr.ErrOlderMembers) {
		return codeOlderMembers
	}
	return uint32(lockfsm.ErrorCode(err))
}

var errForwarded = errors.New("lockraft: forwarded command failed")

func codeErr(c uint32) error {
	if c == codeOlderMembers {
		return lockerr.ErrOlderMembers
	}
	if c > 255 {
		return errForwarded
	}
	if err, ok := lockfsm.ErrorForCode(byte(c)); ok {
		return err
	}
	return errForwarded
}

// pushedResult is the command (kind, session, seq) and result a push item
// carries, its error decoded.
func pushedResult(r *transportpb.PushResult) (lockfsm.Command, lockfsm.Result) {
	return forward.PushedResult(r, codeErr(r.GetErrCode()))
}

// ---- the Host ----

// fwdHost is the node as its forwarding state sees it (forward.Host).
// Unless a method's comment says otherwise, it runs in the loop.
type fwdHost Node

var _ forward.Host = (*fwdHost)(nil)

// onPush handles results and events the leader pushed.
func (h *fwdHost) onPush(items []*transportpb.PushItem) {
	n := (*Node)(h)
	n.checkOwnSession(n.clock.Now())
	n.loop.stats.pushesReceived += uint64(len(items))
	for _, it := range items {
		if r := it.GetResult(); r != nil {
			cmd, res := pushedResult(r)
			n.onResult(0, &cmd, res)
		} else if e := it.GetEvent(); e != nil {
			ev := forward.PushedEvent(e)
			n.onEvent(0, &ev)
		} else if l := it.GetLeaderChange(); l != nil {
			if n.fwd.ObservePush(l, n.clock.Now()) {
				n.observeGaps.Add(1)
			}
		}
	}
}

// Go runs f as one of the node's helpers (any goroutine).
func (h *fwdHost) Go(f func()) {
	n := (*Node)(h)
	n.bgwg.Add(1)
	go func() {
		defer n.bgwg.Done()
		f()
	}()
}

func (h *fwdHost) Do(f func())    { _ = (*Node)(h).do(context.Background(), f) }
func (h *fwdHost) TryDo(f func()) { (*Node)(h).tryDo(f) }
func (h *fwdHost) Light() bool    { return (*Node)(h).light() }
func (h *fwdHost) Leader() uint64 { return h.loop.leader }

// SeenLeader runs on any goroutine.
func (h *fwdHost) SeenLeader() uint64 { return h.lead.Load() }
func (h *fwdHost) RaftLeader() uint64 { return h.rn.BasicStatus().Lead }

func (h *fwdHost) SetLeader(id uint64) {
	n := (*Node)(h)
	n.loop.leader = id
	n.lead.set(id)
	if id != 0 {
		n.log.Info("light member: leader found", "leader", views.MemberID(id))
		n.reproposeAll()
	}
}

// Members runs on any goroutine.
func (h *fwdHost) Members() []membership.Member {
	if h.ml == nil {
		return nil
	}
	return h.ml.Members()
}

func (h *fwdHost) Session() uint64 { return h.loop.own.id }

func (h *fwdHost) SessionOpened(nonce, session uint64) {
	n := (*Node)(h)
	n.onSessionOpenedEvent(0, &lockfsm.Event{Kind: lockfsm.EventSessionOpened, Node: n.id, Seq: nonce, Session: session})
}

func fwdOp(seq uint64, o *op) forward.Op {
	return forward.Op{Seq: seq, Kind: o.cmd.Kind, Name: o.cmd.Name, Owner: o.cmd.Owner, Parked: o.parked,
		Abandoned: o.abandoned, FirstProposed: o.firstProposed}
}

func (h *fwdHost) EachQueued(f func(forward.Op)) {
	for seq, o := range h.loop.ops.queued {
		f(fwdOp(seq, o))
	}
}

func (h *fwdHost) EachInflight(f func(forward.Op)) {
	for seq, o := range h.loop.ops.inflight {
		f(fwdOp(seq, o))
	}
}

func (h *fwdHost) Inflight(seq uint64) (forward.Op, bool) {
	if o := h.loop.ops.inflight[seq]; o != nil {
		return fwdOp(seq, o), true
	}
	return forward.Op{}, false
}

func (h *fwdHost) Queued(seq uint64) (forward.Op, bool) {
	if o := h.loop.ops.queued[seq]; o != nil {
		return fwdOp(seq, o), true
	}
	return forward.Op{}, false
}

func (h *fwdHost) Relearned(seq uint64, res lockfsm.Result) {
	n := (*Node)(h)
	r := &n.loop.ops
	o := r.inflight[seq]
	delete(r.inflight, seq)
	if res.Status == lockfsm.Granted {
		n.relearned.Add(1)
	}
	n.onAcquireResult(o, res)
	r.advanceAck()
}

func (h *fwdHost) StatusEvent(ev *lockfsm.Event) {
	n := (*Node)(h)
	if ev.Kind == lockfsm.EventGranted {
		n.relearned.Add(1)
	}
	n.onEvent(0, ev)
}

func (h *fwdHost) StatusAnswered(session uint64, seqs []uint64, facts []*transportpb.StatusFact) {
	n := (*Node)(h)
	n.checkOwnSession(n.clock.Now()) // S5: no grant handed out past the holder deadline
	if session != n.loop.own.id {
		return
	}
	n.fwd.ApplyStatus(session, seqs, facts)
}

// Pushed runs on the goroutine of the call whose reply carried items.
func (h *fwdHost) Pushed(items []*transportpb.PushItem) {
	n := (*Node)(h)
	if n.k.PushesDropped() {
		return
	}
	_ = n.do(context.Background(), func() { h.onPush(items) })
}

func (h *fwdHost) EachWatched(f func(name string, known bool, chain uint64)) {
	for name, ob := range h.loop.observe.byName {
		f(name, ob.known, ob.chain)
	}
}

func (h *fwdHost) Watched(name string) (known bool, chain uint64, ok bool) {
	if ob := h.loop.observe.byName[name]; ob != nil {
		return ob.known, ob.chain, true
	}
	return false, 0, false
}

func (h *fwdHost) Deliver(c forward.Change) {
	if ob := h.loop.observe.byName[c.Name]; ob != nil {
		ob.deliver(LeaderChange(c))
	}
}

func (h *fwdHost) Known(name string, chain uint64) {
	if ob := h.loop.observe.byName[name]; ob != nil {
		ob.known = true
		ob.chain = max(ob.chain, chain)
	}
}

func (h *fwdHost) Lagged(name string) {
	if ob := h.loop.observe.byName[name]; ob != nil {
		h.loop.observe.lagged(name, ob)
	}
}

func (h *fwdHost) Ready() bool { return h.loop.lease.Active() }

func (h *fwdHost) InConfig(id uint64) bool {
	cs := h.loop.confState
	return slices.Contains(cs.GetVoters(), id) || slices.Contains(cs.GetLearners(), id) ||
		slices.Contains(cs.GetVotersOutgoing(), id)
}

func (h *fwdHost) CheckForwarded(from uint64, data []byte) (lockfsm.Command, bool, error) {
	if len(data) > maxCommandSize {
		return lockfsm.Command{}, false, errTooLarge
	}
	cmd, err := lockfsm.DecodeCommand(data)
	if err != nil {
		return cmd, false, errUndecodable
	}
	switch err := (*Node)(h).authorise(from, &cmd); {
	case err == nil:
		return cmd, true, nil
	case errors.Is(err, errUnknownSession):
		return cmd, false, nil
	default:
		return cmd, false, err
	}
}

func (h *fwdHost) Admit(data []byte) error { return h.fleet.AdmitForwarded(data, true) }
func (h *fwdHost) Propose(data []byte) {
	h.loop.props.add((*Node)(h).withRunLimitData(data), nil)
}

func (h *fwdHost) CheckOwner(from, session uint64) error {
	if err := (*Node)(h).ownsSession(from, session); errors.Is(err, errNotYours) {
		return err
	}
	return nil
}

func (h *fwdHost) SessionOpen(session uint64) bool {
	_, ok := h.loop.lease.SessionDeadline(session)
	return ok
}
