package node

// Light members (membership/doc.go, "Fleet scale").
//
// A node with gossip but no raft state is not in the raft configuration: no
// leader replicates the log to it. It still serves Lock, TryLock and Unlock,
// by forwarding to the leader:
//
//   - Session: FwdOpen asks the leader to propose OpenSession with the
//     member's raft id and nonce; the reply carries the session id once the
//     entry is applied on the leader. The member keeps the session alive with
//     the ordinary Keepalive call (confirmed by a ReadIndex round, so S5
//     holds as on a raft member).
//   - Commands: the op registry is the raft member's (session, seq,
//     AckedBelow, retries, abandon → Cancel); only the last step differs:
//     the encoded command goes to the leader in a FwdPropose call (all
//     commands queued meanwhile share one call) and the leader proposes the
//     bytes verbatim once it has checked each is a command the member may
//     issue, for a session of the member's own (authz.go). They carry the
//     member's session and seq, so lockfsm applies a retry at most once,
//     across leader changes too (S6).
//   - Results and events: the leader, on applying a command of a session
//     whose node is not in the raft configuration, and on every event of
//     such a session, queues them for that member; one goroutine per member
//     sends the queue in FwdPush calls, which a member accepts only from
//     the leader it follows. A push that fails is dropped: the
//     member re-proposes an overdue command on its retry timer and gets the
//     retained result as a duplicate, and it asks the leader about its
//     queued Acquires (FwdStatus: granted with token T, still queued, or
//     gone) at once when it finds a leader, and then only every SessionTTL/4
//     while it waits: a missed grant is re-learned that way, and waiting
//     costs the leader almost nothing (L4).
//   - Leader: learned from the replies (a non-leader answers with its leader
//     hint); at first, and after a failed call, any alive member with raft
//     data is asked.
//
// The leader's cost per light member is its keepalives (batched into the
// leader's confirmation rounds), the commands it makes and one idle push
// goroutine: no replica stream, no log copy.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

const (
	maxFwdQueue = 8192 // items per queue beyond which new ones are dropped
	// maxStatusQueries bounds the acquires one FwdStatus asks about (the
	// rest wait for the next one).
	maxStatusQueries = 1 << 14
)

// fwdState is the loop-owned part of forwarding, member and leader side.
type fwdState struct {
	// member side
	out      *batcher[[]byte] // proposals on their way to the leader
	statusAt time.Time        // last fwd-status sent
	waitedAt time.Time        // last fwd-status that asked about the queued Acquires
	probeAt  time.Time        // last leader probe
	// observeAt: last Observe call sent; observeDue: send one now (a new
	// leader, a gap, a new name); observeBusy: one is in flight
	// (fwdobserve.go).
	observeAt   time.Time
	observeDue  bool
	observeBusy bool
	// leader side
	remote map[uint64]uint64 // session -> node, sessions of light members
	// closers: session -> the light member that forwarded its CloseSession
	// (an earlier incarnation's or a duplicate session: no longer in remote
	// once closed, and the member waits for the result to stop retrying).
	closers map[uint64]uint64
	pushers map[uint64]*batcher[*transportpb.PushItem]
	opens   map[openKey]*pendingOpen
	replies map[uint64]*fwdReplyWaiter      // node -> its fwd-propose call held for results (fwdreply.go)
	subs    map[string]map[uint64]time.Time // election name -> light members watching it -> last Observe call (fwdobserve.go)
}

type openKey struct{ node, nonce uint64 }

type pendingOpen struct {
	at      time.Time
	waiters []chan *transportpb.FwdOpenResponse
}

// fwdCandidate rotates over the members that may know the leader.
var fwdRotor atomic.Uint64

func (n *Node) initFwd() {
	f := &n.loop.fwd
	f.remote = map[uint64]uint64{}
	f.closers = map[uint64]uint64{}
	f.pushers = map[uint64]*batcher[*transportpb.PushItem]{}
	f.opens = map[openKey]*pendingOpen{}
	f.replies = map[uint64]*fwdReplyWaiter{}
	f.subs = map[string]map[uint64]time.Time{}
	f.out = &batcher[[]byte]{send: n.sendForwarded}
}

// light reports whether this node is a light member: gossip, no raft state.
func (n *Node) light() bool { return n.ml != nil && !n.storage.HasState() }

// fwdTarget is where a forwarded call goes: the known leader, else some
// alive member with raft data.
func (n *Node) fwdTarget() uint64 {
	if l := n.lead.Load(); l != 0 {
		return l
	}
	if n.ml == nil {
		return 0
	}
	var cands []uint64
	for _, m := range n.ml.Members() {
		if m.State == membership.StateAlive && m.Meta.HasData && m.Meta.RaftID != n.id {
			cands = append(cands, m.Meta.RaftID)
		}
	}
	if len(cands) == 0 {
		return 0
	}
	return cands[fwdRotor.Add(1)%uint64(len(cands))]
}

// fwdReply handles the leader part of a reply (run from any goroutine):
// true if target answered as the leader.
func (n *Node) fwdReply(target uint64, notLeader *transportpb.LeaderHint, err error) bool {
	switch {
	case err != nil:
		n.tryDo(func() { n.fwdLeaderLost(target) })
		return false
	case notLeader != nil:
		hint := notLeader.GetLeader()
		n.tryDo(func() {
			n.fwdLeaderLost(target)
			if hint != 0 && hint != n.id {
				n.setFwdLeader(hint)
			}
		})
		return false
	}
	n.tryDo(func() { n.setFwdLeader(target) })
	return true
}

// setFwdLeader records the leader of a light member (loop).
func (n *Node) setFwdLeader(id uint64) {
	if !n.light() || id == 0 || id == n.loop.leader {
		return
	}
	if rl := n.rn.BasicStatus().Lead; rl != 0 && rl != id {
		return // raft itself follows a leader (this node is being added): its view wins
	}
	n.loop.leader = id
	n.setLeader(id)
	n.log.Info("light member: leader found", "leader", id)
	n.reproposeAll()
	n.loop.fwd.statusAt, n.loop.fwd.waitedAt = time.Time{}, time.Time{}
	n.loop.fwd.observeDue = true // subscribe with the new leader
}

// fwdLeaderLost forgets a leader that failed a call or denied leading.
func (n *Node) fwdLeaderLost(id uint64) {
	if !n.light() || n.loop.leader != id || id == 0 {
		return
	}
	if n.rn.BasicStatus().Lead == id {
		// Raft itself follows id: this node is being added and is light only
		// until its first write is durable. Forgetting id here would leave
		// the loop without a leader that raft never reports again.
		return
	}
	n.loop.leader = 0
	n.setLeader(0)
}

// fwdWaitCheck is how often a light member with queued Acquires asks the
// leader about them (fwdTick): a quarter of the session TTL, at least
// RetryInterval.
func (n *Node) fwdWaitCheck() time.Duration {
	return max(n.cfg.RetryInterval, n.cfg.SessionTTL/4)
}

func notLeader(hint uint64) *transportpb.LeaderHint { return &transportpb.LeaderHint{Leader: hint} }

// ---- batching ----

// batcher sends queued items from one goroutine at a time, all items queued
// meanwhile in one call.
type batcher[T any] struct {
	mu      sync.Mutex
	items   []T
	running bool
	send    func([]T)
}

// add queues item; called from the loop (which owns n.bgwg.Add).
func (b *batcher[T]) add(n *Node, item T) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.items) >= maxFwdQueue {
		return // dropped: the retry paths recover it
	}
	b.items = append(b.items, item)
	if !b.running {
		b.running = true
		n.bgwg.Add(1)
		go b.run(n)
	}
}

// busy reports whether items are queued or a send is in flight.
func (b *batcher[T]) busy() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.running || len(b.items) > 0
}

func (b *batcher[T]) run(n *Node) {
	defer n.bgwg.Done()
	for {
		b.mu.Lock()
		items := b.items
		b.items = nil
		if len(items) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		select {
		case <-n.stopc:
			b.mu.Lock()
			b.items, b.running = nil, false
			b.mu.Unlock()
			return
		default:
		}
		b.send(items)
	}
}

// ---- member side ----

// forward queues an encoded command for the leader (loop).
func (n *Node) forward(data []byte) {
	n.loop.fwd.out.add(n, slices.Clone(data))
}

func (n *Node) sendForwarded(items [][]byte) {
	target := n.fwdTarget()
	if target == 0 {
		return // retried on the retry timer
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RetryInterval)
	defer cancel()
	var t0 time.Time
	if m := n.cfg.Metrics; m != nil && m.Forward != nil {
		t0 = time.Now()
	}
	resp, err := n.tr.FwdPropose(ctx, target, &transportpb.FwdProposeRequest{Commands: items})
	if !t0.IsZero() {
		n.cfg.Metrics.Forward(time.Since(t0))
	}
	if n.fwdReply(target, resp.GetNotLeader(), err) {
		n.fwdReplyItems(resp.GetItems())
	}
}

// fwdOpen asks target (the leader, or a member that may know it) to open
// this member's session (from the loop; the call runs in the background).
func (n *Node) fwdOpen(nonce, target uint64) {
	ttl := uint64(n.cfg.SessionTTL.Milliseconds())
	n.bgwg.Add(1)
	go func() {
		defer n.bgwg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 2*n.cfg.RetryInterval)
		defer cancel()
		resp, err := n.tr.FwdOpen(ctx, target, &transportpb.FwdOpenRequest{Nonce: nonce, TtlMillis: ttl})
		if !n.fwdReply(target, resp.GetNotLeader(), err) || resp.GetSession() == 0 {
			return
		}
		sess := resp.GetSession()
		_ = n.do(context.Background(), func() {
			n.onSessionOpenedEvent(0, &lockfsm.Event{Kind: lockfsm.EventSessionOpened, Node: n.id, Seq: nonce, Session: sess})
		})
	}()
}

// fwdTick runs in the retry pass of a light member: find the leader if
// unknown, and ask about queued Acquires whose grant may have been missed.
func (n *Node) fwdTick(now time.Time) {
	f := &n.loop.fwd
	if n.loop.leader == 0 {
		if now.Sub(f.probeAt) >= n.cfg.RetryInterval {
			f.probeAt = now
			f.out.add(n, nil) // an empty command: the leader answers, others hint
		}
		return
	}
	n.fwdObserveTick(now)
	r := &n.loop.ops
	if n.loop.own.id == 0 || now.Sub(f.statusAt) < n.cfg.RetryInterval {
		return
	}
	sess := n.loop.own.id
	req := &transportpb.FwdStatusRequest{Session: sess}
	var seqs []uint64
	add := func(seq uint64, o *op) {
		if len(seqs) >= maxStatusQueries {
			return // the rest are asked next time
		}
		seqs = append(seqs, seq)
		req.Queries = append(req.Queries, &transportpb.StatusQuery{Seq: seq, Name: o.cmd.Name, Owner: o.cmd.Owner})
	}
	// Queued Acquires learn their grant by push (L4: waiting costs
	// nothing). Asking is only the safety net for a push that failed while
	// the member and the leader still reach each other (a lost connection
	// makes the member find the leader again, and finding it asks at
	// once), so it is rare: every fwdWaitCheck.
	askQueued := now.Sub(f.waitedAt) >= n.fwdWaitCheck()
	if askQueued {
		for seq, o := range r.queued {
			add(seq, o)
		}
	}
	// Acquires whose result is overdue: their result push may have been
	// lost, and a retry's duplicate result is pushed the same way.
	for seq, o := range r.inflight {
		if o.cmd.Kind == lockfsm.KindAcquire && !o.parked && !o.abandoned && !o.firstProposed.IsZero() &&
			now.Sub(o.firstProposed) >= n.cfg.RetryInterval {
			add(seq, o)
		}
	}
	if len(seqs) == 0 {
		return
	}
	f.statusAt = now
	if askQueued {
		f.waitedAt = now
	}
	target := n.loop.leader
	n.bgwg.Add(1)
	go func() {
		defer n.bgwg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RetryInterval)
		defer cancel()
		resp, err := n.tr.FwdStatus(ctx, target, req)
		if !n.fwdReply(target, resp.GetNotLeader(), err) {
			return
		}
		facts := resp.GetFacts()
		_ = n.do(context.Background(), func() { n.onFwdStatus(sess, seqs, facts) })
	}()
}

func (n *Node) onFwdStatus(sess uint64, seqs []uint64, facts []*transportpb.StatusFact) {
	n.checkOwnSession(n.clock.Now()) // S5: no grant handed out past the holder deadline
	if sess != n.loop.own.id {
		return
	}
	for i, seq := range seqs {
		if i >= len(facts) {
			return
		}
		st, tok := facts[i].GetState(), facts[i].GetToken()
		r := &n.loop.ops
		if o := r.inflight[seq]; o != nil && !o.parked && !o.abandoned && o.cmd.Kind == lockfsm.KindAcquire &&
			st != transportpb.AcquireState_ACQUIRE_STATE_GONE {
			// Its result was lost on the way: the lock table says what it was.
			delete(r.inflight, seq)
			if st == transportpb.AcquireState_ACQUIRE_STATE_GRANTED {
				n.relearned.Add(1)
				n.onAcquireResult(o, lockfsm.Result{Status: lockfsm.Granted, Token: tok, Duplicate: true})
			} else {
				n.onAcquireResult(o, lockfsm.Result{Status: lockfsm.Queued})
			}
			r.advanceAck()
			continue
		}
		o := r.queued[seq]
		if o == nil {
			continue
		}
		switch st {
		case transportpb.AcquireState_ACQUIRE_STATE_GRANTED:
			n.relearned.Add(1)
			n.onEvent(0, &lockfsm.Event{Kind: lockfsm.EventGranted, Session: sess, Seq: seq, Name: o.cmd.Name,
				Owner: o.cmd.Owner, Token: tok, FromQueue: true})
		case transportpb.AcquireState_ACQUIRE_STATE_GONE:
			n.onEvent(0, &lockfsm.Event{Kind: lockfsm.EventWaitEnded, Session: sess, Seq: seq, Name: o.cmd.Name,
				Owner: o.cmd.Owner, Reason: lockfsm.ReasonSessionExpired})
		}
	}
}

// onPush handles results and events the leader pushed (loop).
func (n *Node) onPush(items []*transportpb.PushItem) {
	n.checkOwnSession(n.clock.Now())
	n.loop.stats.pushesReceived += uint64(len(items))
	for _, it := range items {
		if r := it.GetResult(); r != nil {
			cmd, res := pushedResult(r)
			n.onResult(0, &cmd, res)
		} else if e := it.GetEvent(); e != nil {
			ev := pushedEvent(e)
			n.onEvent(0, &ev)
		} else if l := it.GetLeaderChange(); l != nil {
			n.onLeaderChangePush(l)
		}
	}
}

// ---- leader side ----

// fwdBecomeLeader rebuilds which sessions belong to light members.
func (n *Node) fwdBecomeLeader() {
	f := &n.loop.fwd
	clear(f.remote)
	for _, s := range n.fsm.Sessions() {
		if n.isLightNode(s.Node) {
			f.remote[s.Session] = s.Node
		}
	}
}

// fwdStepDown answers pending opens: the caller asks the new leader.
func (n *Node) fwdStepDown() {
	n.fwdExpireReplies(time.Time{}, true)
	for k, p := range n.loop.fwd.opens {
		for _, w := range p.waiters {
			w <- &transportpb.FwdOpenResponse{NotLeader: notLeader(n.loop.leader)}
		}
		delete(n.loop.fwd.opens, k)
	}
}

func (n *Node) isLightNode(id uint64) bool {
	if id == 0 || id == n.id {
		return false
	}
	cs := n.loop.confState
	return !slices.Contains(cs.GetVoters(), id) && !slices.Contains(cs.GetLearners(), id) &&
		!slices.Contains(cs.GetVotersOutgoing(), id)
}

// fwdOnResult pushes the result of a light member's command (leader, apply).
func (n *Node) fwdOnResult(cmd *lockfsm.Command, res lockfsm.Result) {
	if !n.loop.isLeader || cmd.Session == 0 {
		return
	}
	node, ok := n.loop.fwd.remote[cmd.Session]
	if cmd.Kind == lockfsm.KindCloseSession {
		if c, asked := n.loop.fwd.closers[cmd.Session]; asked {
			node, ok = c, true
			delete(n.loop.fwd.closers, cmd.Session)
		}
	}
	if !ok || !n.isLightNode(node) {
		return
	}
	item := pushResultItem(cmd, res)
	if !n.fwdToReply(node, item, cmd) {
		n.push(node, item)
	}
}

// fwdOnEvent keeps the remote-session map, answers pending opens and pushes
// a light member's events (leader, apply).
func (n *Node) fwdOnEvent(ev *lockfsm.Event) {
	if !n.loop.isLeader {
		return
	}
	f := &n.loop.fwd
	switch ev.Kind {
	case lockfsm.EventSessionOpened:
		if n.isLightNode(ev.Node) {
			f.remote[ev.Session] = ev.Node
		}
		k := openKey{ev.Node, ev.Seq}
		if p := f.opens[k]; p != nil {
			for _, w := range p.waiters {
				w <- &transportpb.FwdOpenResponse{Session: ev.Session}
			}
			delete(f.opens, k)
		}
		return
	}
	if ev.Kind == lockfsm.EventLeader {
		return // to the members that observe it (fwdPushLeaderChange)
	}
	node, ok := f.remote[ev.Session]
	if !ok {
		return
	}
	if ev.Kind == lockfsm.EventSessionEnded {
		delete(f.remote, ev.Session)
	}
	if ev.Kind == lockfsm.EventGranted && !ev.FromQueue {
		return // the member learns an immediate grant from the Acquire's result
	}
	if n.isLightNode(node) {
		item := pushEventItem(ev)
		if !n.fwdToReply(node, item, nil) {
			n.push(node, item)
		}
	}
}

func (n *Node) push(node uint64, item *transportpb.PushItem) {
	f := &n.loop.fwd
	b := f.pushers[node]
	if b == nil {
		b = &batcher[*transportpb.PushItem]{send: func(items []*transportpb.PushItem) {
			ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RetryInterval)
			defer cancel()
			_, _ = n.tr.FwdPush(ctx, node, &transportpb.FwdPushRequest{Items: items})
		}}
		f.pushers[node] = b
	}
	n.loop.stats.pushesSent++
	b.add(n, item)
}

// serveFwdOpen serves a light member's request to open its session: the session
// is always the caller's own (Node = its authenticated id), with a TTL of at
// most MaxSessionTTL.
func (n *Node) serveFwdOpen(ctx context.Context, from uint64, req *transportpb.FwdOpenRequest) (*transportpb.FwdOpenResponse, error) {
	if !validTTL(req.GetTtlMillis()) {
		return nil, n.refuseCall(from, "FwdOpen", fmt.Errorf("%w: %d ms", errBadTTL, req.GetTtlMillis()))
	}
	reply := make(chan *transportpb.FwdOpenResponse, 1)
	nonce, ttl := req.GetNonce(), req.GetTtlMillis()
	return awaitLoop(ctx, n, reply, func() { n.fwdOpenOnLeader(from, nonce, ttl, reply) })
}

// serveFwdPropose serves a light member's forwarded commands. Every command must
// be one the member may issue, of a session of its own (authorise); one
// that is not refuses the whole call.
func (n *Node) serveFwdPropose(ctx context.Context, from uint64, req *transportpb.FwdProposeRequest) (*transportpb.FwdProposeResponse, error) {
	reply := make(chan *transportpb.FwdProposeResponse, 1)
	fail := make(chan error, 1)
	cmds := req.GetCommands()
	resp, err := awaitLoop(ctx, n, reply, func() {
		if !n.loop.isLeader {
			reply <- &transportpb.FwdProposeResponse{NotLeader: notLeader(n.loop.leader)}
			return
		}
		if err := n.fwdProposeOnLeader(from, cmds, reply); err != nil {
			fail <- err
			reply <- nil
		}
	})
	select {
	case err := <-fail:
		return nil, n.refuseCall(from, "FwdPropose", err)
	default:
	}
	return resp, err
}

// serveFwdPush serves results and events pushed to this light member; only the
// leader it follows may push (see below for a member looking for its leader).
func (n *Node) serveFwdPush(ctx context.Context, from uint64, req *transportpb.FwdPushRequest) (*transportpb.FwdPushResponse, error) {
	if n.dropPushes() {
		return nil, errors.New("lockraft: push dropped (test)")
	}
	// From the leader this member follows; while it knows none (a call
	// failed, it is looking), from a member with raft data, the only kind
	// that can lead. Never from a light member or a stranger.
	if lead := n.lead.Load(); from != lead && (lead != 0 || !n.members.Allows(from)) {
		return nil, n.refuseCall(from, "FwdPush", fmt.Errorf("%w: push from %d, the leader is %d", transport.ErrPermissionDenied, from, lead))
	}
	items := req.GetItems()
	if err := n.do(ctx, func() { n.onPush(items) }); err != nil {
		return nil, err
	}
	return &transportpb.FwdPushResponse{}, nil
}

// serveFwdStatus serves a light member's question about its own acquires.
func (n *Node) serveFwdStatus(ctx context.Context, from uint64, req *transportpb.FwdStatusRequest) (*transportpb.FwdStatusResponse, error) {
	n.statusServed.Add(1)
	reply := make(chan *transportpb.FwdStatusResponse, 1)
	fail := make(chan error, 1)
	resp, err := awaitLoop(ctx, n, reply, func() {
		r, err := n.fwdStatusOnLeader(from, req)
		if err != nil {
			fail <- err
		}
		reply <- r
	})
	select {
	case err := <-fail:
		return nil, n.refuseCall(from, "FwdStatus", err)
	default:
	}
	return resp, err
}

// awaitLoop runs f in the loop and waits for what it sends on reply.
func awaitLoop[T any](ctx context.Context, n *Node, reply chan T, f func()) (T, error) {
	var zero T
	if err := n.do(ctx, f); err != nil {
		return zero, err
	}
	select {
	case r := <-reply:
		return r, nil
	case <-ctx.Done():
		return zero, context.Cause(ctx)
	case <-n.donec:
		return zero, ErrClosed
	}
}

func (n *Node) fwdOpenOnLeader(from, nonce, ttl uint64, reply chan *transportpb.FwdOpenResponse) {
	if !n.loop.isLeader {
		reply <- &transportpb.FwdOpenResponse{NotLeader: notLeader(n.loop.leader)}
		return
	}
	f := &n.loop.fwd
	k := openKey{from, nonce}
	p := f.opens[k]
	now := n.clock.Now()
	if p == nil || now.Sub(p.at) >= n.cfg.RetryInterval {
		if p == nil {
			p = &pendingOpen{}
			f.opens[k] = p
		}
		p.at = now
		n.proposeSessionless(lockfsm.Command{Kind: lockfsm.KindOpenSession, Node: from, TTLMillis: ttl, Seq: nonce})
	}
	p.waiters = append(p.waiters, reply)
}

// fwdStatusOnLeader answers from the leader's lock table, which is complete
// only once the leader is ready (its term's first entry applied), and only
// about the caller's own session.
func (n *Node) fwdStatusOnLeader(from uint64, req *transportpb.FwdStatusRequest) (*transportpb.FwdStatusResponse, error) {
	if !n.loop.isLeader || !n.loop.lead.active {
		return &transportpb.FwdStatusResponse{NotLeader: notLeader(0)}, nil
	}
	sess := req.GetSession()
	if err := n.ownsSession(from, sess); errors.Is(err, errNotYours) {
		return nil, err
	}
	out := &transportpb.FwdStatusResponse{Facts: make([]*transportpb.StatusFact, 0, len(req.GetQueries()))}
	_, alive := n.loop.lead.sessions[sess]
	for _, q := range req.GetQueries() {
		st, tok := transportpb.AcquireState_ACQUIRE_STATE_QUEUED, uint64(0)
		if alive {
			st = transportpb.AcquireState_ACQUIRE_STATE_GONE
			if li, ok := n.fsm.Lock(q.GetName()); ok {
				if t := grantedTo(li, sess, q.GetOwner(), q.GetSeq()); t != 0 {
					st, tok = transportpb.AcquireState_ACQUIRE_STATE_GRANTED, t
				} else {
					for _, w := range li.Waiters {
						if w.Session == sess && w.Seq == q.GetSeq() {
							st = transportpb.AcquireState_ACQUIRE_STATE_QUEUED
							break
						}
					}
				}
			}
		}
		out.Facts = append(out.Facts, &transportpb.StatusFact{State: st, Token: tok})
	}
	return out, nil
}

// ---- push items ----

// Errors in pushed results travel as lockfsm's stable one-byte codes
// (lockfsm.ErrorCode), plus codeOlderMembers: the leader's version gate
// refused a forwarded catalogue command (versiongate.go). A code this
// version does not know reads as errForwarded.
const codeOlderMembers = 254

func errCode(err error) uint32 {
	if errors.Is(err, ErrOlderMembers) {
		return codeOlderMembers
	}
	return uint32(lockfsm.ErrorCode(err))
}

var errForwarded = errors.New("lockraft: forwarded command failed")

func codeErr(c uint32) error {
	if c == codeOlderMembers {
		return ErrOlderMembers
	}
	if c > 255 {
		return errForwarded
	}
	if err, ok := lockfsm.ErrorForCode(byte(c)); ok {
		return err
	}
	return errForwarded
}

func pushResultItem(cmd *lockfsm.Command, res lockfsm.Result) *transportpb.PushItem {
	return &transportpb.PushItem{Item: &transportpb.PushItem_Result{Result: &transportpb.PushResult{
		Kind: uint32(cmd.Kind), Session: cmd.Session, Seq: cmd.Seq, Status: uint32(res.Status),
		ErrCode: errCode(res.Err), Duplicate: res.Duplicate, Token: res.Token, HoldCount: res.HoldCount,
		Position: res.Position, HolderSession: res.Holder.Session, HolderOwner: res.Holder.Owner}}}
}

// pushedResult is the command (kind, session, seq) and result a push item
// carries. Out-of-range kinds and statuses become values no handler acts on.
func pushedResult(r *transportpb.PushResult) (lockfsm.Command, lockfsm.Result) {
	cmd := lockfsm.Command{Kind: lockfsm.Kind(min(r.GetKind(), 255)), Session: r.GetSession(), Seq: r.GetSeq()}
	res := lockfsm.Result{Status: lockfsm.Status(min(r.GetStatus(), 255)), Err: codeErr(r.GetErrCode()),
		Duplicate: r.GetDuplicate(), Token: r.GetToken(), HoldCount: r.GetHoldCount(), Position: r.GetPosition(),
		Holder: lockfsm.Holder{Session: r.GetHolderSession(), Owner: r.GetHolderOwner()}}
	return cmd, res
}

func pushEventItem(ev *lockfsm.Event) *transportpb.PushItem {
	return &transportpb.PushItem{Item: &transportpb.PushItem_Event{Event: &transportpb.PushEvent{
		Kind: uint32(ev.Kind), Reason: uint32(ev.Reason), FromQueue: ev.FromQueue, Session: ev.Session,
		Seq: ev.Seq, Token: ev.Token, LeaseMillis: ev.LeaseMillis, Name: ev.Name, Owner: ev.Owner,
		Mode: uint32(ev.Mode), Permits: ev.Permits, ExtraNames: ev.ExtraNames}}}
}

func pushedEvent(e *transportpb.PushEvent) lockfsm.Event {
	return lockfsm.Event{Kind: lockfsm.EventKind(min(e.GetKind(), 255)), Reason: lockfsm.Reason(min(e.GetReason(), 255)),
		FromQueue: e.GetFromQueue(), Session: e.GetSession(), Seq: e.GetSeq(), Token: e.GetToken(),
		LeaseMillis: e.GetLeaseMillis(), Name: e.GetName(), Owner: e.GetOwner(),
		Mode: lockfsm.Mode(min(e.GetMode(), 255)), Permits: e.GetPermits(), ExtraNames: e.GetExtraNames()}
}
