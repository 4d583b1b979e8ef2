package node

// Light members (membership/doc.go, "Fleet scale").
//
// A node with gossip but no raft state is not in the raft configuration: no
// leader replicates the log to it. It still serves Lock, TryLock and Unlock,
// by forwarding to the leader:
//
//   - Session: "fwd-open" asks the leader to propose OpenSession with the
//     member's raft id and nonce; the reply carries the session id once the
//     entry is applied on the leader. The member keeps the session alive with
//     the ordinary keepalive Call (confirmed by a ReadIndex round, so S5
//     holds as on a raft member).
//   - Commands: the op registry is the raft member's (session, seq,
//     AckedBelow, retries, abandon → Cancel); only the last step differs:
//     the encoded command goes to the leader in a "fwd-propose" Call (all
//     commands queued meanwhile share one call) and the leader proposes the
//     bytes verbatim. They carry the member's session and seq, so lockfsm
//     applies a retry at most once, across leader changes too (S6).
//   - Results and events: the leader, on applying a command of a session
//     whose node is not in the raft configuration, and on every event of
//     such a session, queues them for that member; one goroutine per member
//     sends the queue in "fwd-push" Calls. A push that fails is dropped: the
//     member re-proposes an overdue command on its retry timer and gets the
//     retained result as a duplicate, and it asks the leader about its
//     queued Acquires ("fwd-status": granted with token T, still queued, or
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
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/membership"
)

const (
	methodFwdOpen    = "fwd-open"
	methodFwdPropose = "fwd-propose"
	methodFwdPush    = "fwd-push"
	methodFwdStatus  = "fwd-status"

	fwdOK        = 1
	fwdNotLeader = 2 // followed by 8 bytes: the leader hint (0 = unknown)

	maxFwdQueue = 8192 // items per queue beyond which new ones are dropped
)

// fwdState is the loop-owned part of forwarding, member and leader side.
type fwdState struct {
	// member side
	out      *batcher  // proposals on their way to the leader
	statusAt time.Time // last fwd-status sent
	waitedAt time.Time // last fwd-status that asked about the queued Acquires
	probeAt  time.Time // last leader probe
	// observeAt: last fwd-observe sent; observeDue: send one now (a new
	// leader, a gap, a new name); observeBusy: one is in flight
	// (fwdobserve.go).
	observeAt   time.Time
	observeDue  bool
	observeBusy bool
	// leader side
	remote  map[uint64]uint64 // session -> node, sessions of light members
	pushers map[uint64]*batcher
	opens   map[openKey]*pendingOpen
	replies map[uint64]*fwdReplyWaiter      // node -> its fwd-propose call held for results (fwdreply.go)
	subs    map[string]map[uint64]time.Time // election name -> light members watching it -> last fwd-observe (fwdobserve.go)
}

type openKey struct{ node, nonce uint64 }

type pendingOpen struct {
	at      time.Time
	waiters []chan []byte
}

// fwdCandidate rotates over the members that may know the leader.
var fwdRotor atomic.Uint64

func (n *Node) initFwd() {
	f := &n.loop.fwd
	f.remote = map[uint64]uint64{}
	f.pushers = map[uint64]*batcher{}
	f.opens = map[openKey]*pendingOpen{}
	f.replies = map[uint64]*fwdReplyWaiter{}
	f.subs = map[string]map[uint64]time.Time{}
	f.out = &batcher{send: n.sendForwarded}
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
func (n *Node) fwdReply(target uint64, resp []byte, err error) bool {
	switch {
	case err != nil || len(resp) == 0:
		n.tryDo(func() { n.fwdLeaderLost(target) })
		return false
	case resp[0] == fwdNotLeader:
		var hint uint64
		if len(resp) >= 9 {
			hint = binary.BigEndian.Uint64(resp[1:9])
		}
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
	n.loop.leader = id
	n.lead.Store(id)
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
	n.loop.leader = 0
	n.lead.Store(0)
}

// fwdWaitCheck is how often a light member with queued Acquires asks the
// leader about them (fwdTick): a quarter of the session TTL, at least
// RetryInterval.
func (n *Node) fwdWaitCheck() time.Duration {
	return max(n.cfg.RetryInterval, n.cfg.SessionTTL/4)
}

func notLeaderReply(hint uint64) []byte {
	b := make([]byte, 9)
	b[0] = fwdNotLeader
	binary.BigEndian.PutUint64(b[1:], hint)
	return b
}

// ---- batching ----

// batcher sends queued items from one goroutine at a time, all items queued
// meanwhile in one call.
type batcher struct {
	mu      sync.Mutex
	items   [][]byte
	running bool
	send    func([][]byte)
}

// add queues item; called from the loop (which owns n.bgwg.Add).
func (b *batcher) add(n *Node, item []byte) {
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
func (b *batcher) busy() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.running || len(b.items) > 0
}

func (b *batcher) run(n *Node) {
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

func encodeBatch(items [][]byte) []byte {
	size := 4
	for _, it := range items {
		size += len(it) + 4
	}
	b := make([]byte, 0, size)
	b = binary.AppendUvarint(b, uint64(len(items)))
	for _, it := range items {
		b = binary.AppendUvarint(b, uint64(len(it)))
		b = append(b, it...)
	}
	return b
}

var errBadFwd = errors.New("lockraft: bad forwarded request")

func decodeBatch(b []byte) ([][]byte, error) {
	cnt, k := binary.Uvarint(b)
	if k <= 0 || cnt > uint64(len(b)) {
		return nil, errBadFwd
	}
	b = b[k:]
	out := make([][]byte, 0, cnt)
	for i := uint64(0); i < cnt; i++ {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, errBadFwd
		}
		out = append(out, b[k:k+int(l)])
		b = b[k+int(l):]
	}
	return out, nil
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
	resp, err := n.tr.Call(ctx, target, methodFwdPropose, encodeBatch(items))
	if n.fwdReply(target, resp, err) {
		n.fwdReplyItems(resp)
	}
}

// fwdOpen asks target (the leader, or a member that may know it) to open
// this member's session (from the loop; the call runs in the background).
func (n *Node) fwdOpen(nonce, target uint64) {
	ttl := uint64(n.cfg.SessionTTL.Milliseconds())
	n.bgwg.Add(1)
	go func() {
		defer n.bgwg.Done()
		var req [16]byte
		binary.BigEndian.PutUint64(req[:8], nonce)
		binary.BigEndian.PutUint64(req[8:], ttl)
		ctx, cancel := context.WithTimeout(context.Background(), 2*n.cfg.RetryInterval)
		defer cancel()
		resp, err := n.tr.Call(ctx, target, methodFwdOpen, req[:])
		if !n.fwdReply(target, resp, err) || len(resp) != 9 {
			return
		}
		sess := binary.BigEndian.Uint64(resp[1:])
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
	var req []byte
	req = binary.AppendUvarint(req, sess)
	var seqs []uint64
	add := func(seq uint64, o *op) {
		seqs = append(seqs, seq)
		req = binary.AppendUvarint(req, seq)
		req = appendStr(req, o.cmd.Name)
		req = appendStr(req, o.cmd.Owner)
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
		resp, err := n.tr.Call(ctx, target, methodFwdStatus, req)
		if !n.fwdReply(target, resp, err) {
			return
		}
		facts := resp[1:]
		_ = n.do(context.Background(), func() { n.onFwdStatus(sess, seqs, facts) })
	}()
}

const (
	statusQueued  = 0
	statusGranted = 1
	statusGone    = 2
)

func (n *Node) onFwdStatus(sess uint64, seqs []uint64, facts []byte) {
	n.checkOwnSession(n.clock.Now()) // S5: no grant handed out past the holder deadline
	if sess != n.loop.own.id {
		return
	}
	for _, seq := range seqs {
		if len(facts) == 0 {
			return
		}
		st := facts[0]
		facts = facts[1:]
		tok, k := binary.Uvarint(facts)
		if k <= 0 {
			return
		}
		facts = facts[k:]
		r := &n.loop.ops
		if o := r.inflight[seq]; o != nil && !o.parked && !o.abandoned && o.cmd.Kind == lockfsm.KindAcquire && st != statusGone {
			// Its result was lost on the way: the lock table says what it was.
			delete(r.inflight, seq)
			if st == statusGranted {
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
		case statusGranted:
			n.relearned.Add(1)
			n.onEvent(0, &lockfsm.Event{Kind: lockfsm.EventGranted, Session: sess, Seq: seq, Name: o.cmd.Name,
				Owner: o.cmd.Owner, Token: tok, FromQueue: true})
		case statusGone:
			n.onEvent(0, &lockfsm.Event{Kind: lockfsm.EventWaitEnded, Session: sess, Seq: seq, Name: o.cmd.Name,
				Owner: o.cmd.Owner, Reason: lockfsm.ReasonSessionExpired})
		}
	}
}

// onPush handles results and events the leader pushed (loop).
func (n *Node) onPush(items [][]byte) {
	n.checkOwnSession(n.clock.Now())
	for _, it := range items {
		if len(it) == 0 {
			continue
		}
		switch it[0] {
		case 'r':
			cmd, res, ok := decodePushResult(it[1:])
			if ok {
				n.onResult(0, &cmd, res)
			}
		case 'e':
			ev, ok := decodePushEvent(it[1:])
			if ok {
				n.onEvent(0, &ev)
			}
		case 'l':
			n.onLeaderChangePush(it[1:])
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
			w <- notLeaderReply(n.loop.leader)
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
	if !ok || !n.isLightNode(node) {
		return
	}
	item := encodePushResult(cmd, res)
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
			reply := make([]byte, 9)
			reply[0] = fwdOK
			binary.BigEndian.PutUint64(reply[1:], ev.Session)
			for _, w := range p.waiters {
				w <- reply
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
		item := encodePushEvent(ev)
		if !n.fwdToReply(node, item, nil) {
			n.push(node, item)
		}
	}
}

func (n *Node) push(node uint64, item []byte) {
	f := &n.loop.fwd
	b := f.pushers[node]
	if b == nil {
		b = &batcher{send: func(items [][]byte) {
			ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RetryInterval)
			defer cancel()
			_, _ = n.tr.Call(ctx, node, methodFwdPush, encodeBatch(items))
		}}
		f.pushers[node] = b
	}
	b.add(n, item)
}

// handleFwd serves the forwarding Calls.
func (n *Node) handleFwd(ctx context.Context, from uint64, method string, req []byte) ([]byte, error) {
	reply := make(chan []byte, 1)
	var f func()
	switch method {
	case methodFwdOpen:
		if len(req) != 16 {
			return nil, errBadFwd
		}
		nonce, ttl := binary.BigEndian.Uint64(req), binary.BigEndian.Uint64(req[8:])
		f = func() { n.fwdOpenOnLeader(from, nonce, ttl, reply) }
	case methodFwdPropose:
		items, err := decodeBatch(req)
		if err != nil {
			return nil, err
		}
		f = func() {
			if !n.loop.isLeader {
				reply <- notLeaderReply(n.loop.leader)
				return
			}
			n.fwdProposeOnLeader(from, items, reply)
		}
	case methodFwdPush:
		if n.dropPushes.Load() {
			return nil, errors.New("lockraft: push dropped (test)")
		}
		items, err := decodeBatch(req)
		if err != nil {
			return nil, err
		}
		if err := n.do(ctx, func() { n.onPush(items) }); err != nil {
			return nil, err
		}
		return []byte{fwdOK}, nil
	case methodFwdStatus:
		n.statusServed.Add(1)
		f = func() { reply <- n.fwdStatusOnLeader(req) }
	}
	if err := n.do(ctx, f); err != nil {
		return nil, err
	}
	select {
	case r := <-reply:
		return r, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-n.donec:
		return nil, ErrClosed
	}
}

func (n *Node) fwdOpenOnLeader(from, nonce, ttl uint64, reply chan []byte) {
	if !n.loop.isLeader {
		reply <- notLeaderReply(n.loop.leader)
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
// only once the leader is ready (its term's first entry applied).
func (n *Node) fwdStatusOnLeader(req []byte) []byte {
	if !n.loop.isLeader || !n.loop.lead.active {
		return notLeaderReply(0)
	}
	sess, k := binary.Uvarint(req)
	if k <= 0 {
		return notLeaderReply(0)
	}
	req = req[k:]
	out := []byte{fwdOK}
	_, alive := n.loop.lead.sessions[sess]
	for len(req) > 0 {
		seq, k := binary.Uvarint(req)
		if k <= 0 {
			break
		}
		req = req[k:]
		name, rest, ok1 := readStr(req)
		owner, rest, ok2 := readStr(rest)
		if !ok1 || !ok2 {
			break
		}
		req = rest
		st, tok := byte(statusQueued), uint64(0)
		if alive {
			st = statusGone
			if li, ok := n.fsm.Lock(name); ok {
				if t := grantedTo(li, sess, owner, seq); t != 0 {
					st, tok = statusGranted, t
				} else {
					for _, w := range li.Waiters {
						if w.Session == sess && w.Seq == seq {
							st = statusQueued
							break
						}
					}
				}
			}
		}
		out = append(out, st)
		out = binary.AppendUvarint(out, tok)
	}
	return out
}

// ---- push encoding ----

// Errors in pushed results travel as lockfsm's stable one-byte codes
// (lockfsm.ErrorCode), plus codeOlderMembers: the leader's version gate
// refused a forwarded catalogue command (versiongate.go). A code this
// version does not know reads as errForwarded.
const codeOlderMembers = 254

func errCode(err error) byte {
	if errors.Is(err, ErrOlderMembers) {
		return codeOlderMembers
	}
	return lockfsm.ErrorCode(err)
}

var errForwarded = errors.New("lockraft: forwarded command failed")

func codeErr(c byte) error {
	if c == codeOlderMembers {
		return ErrOlderMembers
	}
	if err, ok := lockfsm.ErrorForCode(c); ok {
		return err
	}
	return errForwarded
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func readStr(b []byte) (string, []byte, bool) {
	l, k := binary.Uvarint(b)
	if k <= 0 || l > uint64(len(b)-k) {
		return "", nil, false
	}
	return string(b[k : k+int(l)]), b[k+int(l):], true
}

type uvReader struct {
	b  []byte
	ok bool
}

func (r *uvReader) u() uint64 {
	v, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.ok = false
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *uvReader) s() string {
	s, rest, ok := readStr(r.b)
	if !ok {
		r.ok = false
		return ""
	}
	r.b = rest
	return s
}

func encodePushResult(cmd *lockfsm.Command, res lockfsm.Result) []byte {
	b := make([]byte, 0, 48)
	b = append(b, 'r', byte(cmd.Kind), byte(res.Status), errCode(res.Err))
	if res.Duplicate {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	for _, v := range []uint64{cmd.Session, cmd.Seq, res.Token, uint64(res.HoldCount), uint64(res.Position), res.Holder.Session} {
		b = binary.AppendUvarint(b, v)
	}
	return appendStr(b, res.Holder.Owner)
}

func decodePushResult(b []byte) (lockfsm.Command, lockfsm.Result, bool) {
	var cmd lockfsm.Command
	var res lockfsm.Result
	if len(b) < 4 {
		return cmd, res, false
	}
	cmd.Kind, res.Status, res.Err, res.Duplicate = lockfsm.Kind(b[0]), lockfsm.Status(b[1]), codeErr(b[2]), b[3] == 1
	r := uvReader{b: b[4:], ok: true}
	cmd.Session, cmd.Seq, res.Token = r.u(), r.u(), r.u()
	res.HoldCount, res.Position = uint32(r.u()), uint32(r.u())
	res.Holder.Session = r.u()
	res.Holder.Owner = r.s()
	return cmd, res, r.ok
}

func encodePushEvent(ev *lockfsm.Event) []byte {
	b := make([]byte, 0, 48)
	b = append(b, 'e', byte(ev.Kind), byte(ev.Reason))
	if ev.FromQueue {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	for _, v := range []uint64{ev.Session, ev.Seq, ev.Token, ev.LeaseMillis} {
		b = binary.AppendUvarint(b, v)
	}
	b = appendStr(b, ev.Name)
	b = appendStr(b, ev.Owner)
	// Catalogue fields, after the version-1 ones (an older member's decoder
	// ignores trailing bytes): the mode, permits and other names that name
	// a hold.
	b = append(b, byte(ev.Mode))
	b = binary.AppendUvarint(b, uint64(ev.Permits))
	b = binary.AppendUvarint(b, uint64(len(ev.ExtraNames)))
	for _, x := range ev.ExtraNames {
		b = appendStr(b, x)
	}
	return b
}

func decodePushEvent(b []byte) (lockfsm.Event, bool) {
	var ev lockfsm.Event
	if len(b) < 3 {
		return ev, false
	}
	ev.Kind, ev.Reason, ev.FromQueue = lockfsm.EventKind(b[0]), lockfsm.Reason(b[1]), b[2] == 1
	r := uvReader{b: b[3:], ok: true}
	ev.Session, ev.Seq, ev.Token, ev.LeaseMillis = r.u(), r.u(), r.u(), r.u()
	ev.Name, ev.Owner = r.s(), r.s()
	if r.ok && len(r.b) > 0 {
		ev.Mode = lockfsm.Mode(r.b[0])
		r.b = r.b[1:]
		ev.Permits = uint32(r.u())
		k := r.u()
		if k > uint64(len(r.b)) {
			return ev, false
		}
		for i := uint64(0); i < k && r.ok; i++ {
			ev.ExtraNames = append(ev.ExtraNames, r.s())
		}
	}
	return ev, r.ok
}
