package node

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// Observing elections from a light member (observe.go): the Observe call
// subscribes the member to names with the leader and fetches what it
// missed; each later change comes as a LeaderChangePush item of the
// member's FwdPush queue (accepted, as every push, only from the leader the
// member follows).

func electionState(c LeaderChange) *transportpb.ElectionState {
	return &transportpb.ElectionState{Index: c.Index, Session: c.Session, Owner: []byte(c.Owner), Token: c.Token,
		Value: []byte(c.Value)}
}

func leaderChangeOf(name string, e *transportpb.ElectionState) LeaderChange {
	return LeaderChange{Name: name, Index: e.GetIndex(), Session: e.GetSession(), Owner: string(e.GetOwner()),
		Token: e.GetToken(), Value: string(e.GetValue())}
}

// fwdObserveTick (member, loop): subscribe again with the leader (a new
// leader, a gap, a new name, or every fwdWaitCheck as a safety net for a
// push that failed while nothing else changed).
func (n *Node) fwdObserveTick(now time.Time) {
	f := &n.loop.fwd
	target := n.loop.leader
	if !n.light() || target == 0 || len(n.loop.observe) == 0 || f.observeBusy {
		return
	}
	if !f.observeDue && now.Sub(f.observeAt) < n.fwdWaitCheck() {
		return
	}
	f.observeDue, f.observeAt, f.observeBusy = false, now, true
	names := make([]string, 0, len(n.loop.observe))
	for name := range n.loop.observe {
		names = append(names, name)
	}
	slices.Sort(names)
	req := &transportpb.ObserveRequest{Names: make([]*transportpb.ObserveName, 0, len(names))}
	afters := make([]uint64, len(names))
	for i, name := range names {
		ob := n.loop.observe[name]
		if ob.known {
			afters[i] = ob.chain
		}
		req.Names = append(req.Names, &transportpb.ObserveName{Name: name, After: afters[i]})
	}
	n.bgwg.Add(1)
	go func() {
		defer n.bgwg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RetryInterval)
		defer cancel()
		resp, err := n.tr.Observe(ctx, target, req)
		ok := n.fwdReply(target, resp.GetNotLeader(), err)
		_ = n.do(context.Background(), func() {
			f.observeBusy = false
			if !ok {
				f.observeDue = true
				return
			}
			n.onObserveReply(names, afters, resp.GetElections())
		})
	}()
}

// onObserveReply applies the leader's answer for names, asked with the
// changes after afters (0: the current state) (member, loop): one election
// per name asked, in order. A current state given where changes were asked
// for means the leader cannot show them all: the observers are told
// (ErrObserveLagged), never given the state in their place.
func (n *Node) onObserveReply(names []string, afters []uint64, els []*transportpb.ObservedElection) {
	if !n.light() {
		return // promoted meanwhile: this node applies the changes itself
	}
	for i, name := range names {
		if i >= len(els) {
			return
		}
		e := els[i]
		ob := n.loop.observe[name]
		if ob == nil {
			continue
		}
		switch {
		case afters[i] != 0 && !ob.known:
			// The observers asked for were ended meanwhile: ask afresh.
			n.loop.fwd.observeDue = true
			continue
		case afters[i] != 0 && e.GetCurrent():
			n.lagged(name, ob)
			continue
		case afters[i] == 0 && (ob.known || !e.GetCurrent()):
			continue // answered meanwhile, or not an answer to this question
		}
		for _, st := range e.GetChanges() {
			c := leaderChangeOf(name, st)
			if afters[i] == 0 || c.Index > afters[i] {
				n.deliver(ob, c)
			}
		}
		ob.known = true
		ob.chain = max(ob.chain, e.GetChain())
	}
}

// onLeaderChangePush handles one pushed change (member, loop): in order if
// nothing changed between the last change the member has and it (its Prev
// is at or before the member's chain), a duplicate if it does not come
// after the chain, else a gap: ask the leader for what is missing.
func (n *Node) onLeaderChangePush(p *transportpb.LeaderChangePush) {
	if !n.light() {
		return
	}
	ob := n.loop.observe[p.GetName()]
	if ob == nil || !ob.known || p.GetChange() == nil {
		return
	}
	c := leaderChangeOf(p.GetName(), p.GetChange())
	switch {
	case c.Index <= ob.chain:
		return // a duplicate
	case p.GetPrev() != 0 && p.GetPrev() <= ob.chain:
		n.deliver(ob, c)
	default:
		n.observeGaps.Add(1)
		n.loop.fwd.observeDue = true
		n.fwdObserveTick(n.clock.Now())
	}
}

// handleObserve serves Observe on the leader: each name's changes after the
// member's chain index (or its current state), and a subscription to the
// later ones. Names are checked as lockfsm checks them; a request naming an
// invalid one is refused.
func (n *Node) handleObserve(ctx context.Context, from uint64, req *transportpb.ObserveRequest) (*transportpb.ObserveResponse, error) {
	for _, q := range req.GetNames() {
		if name := q.GetName(); name == "" || len(name) > lockfsm.MaxNameLen {
			return nil, fmt.Errorf("%w: election name of %d bytes", transport.ErrInvalidRequest, len(name))
		}
	}
	reply := make(chan *transportpb.ObserveResponse, 1)
	if err := n.do(ctx, func() { reply <- n.observeOnLeader(from, req) }); err != nil {
		return nil, err
	}
	select {
	case r := <-reply:
		return r, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

func (n *Node) observeOnLeader(from uint64, req *transportpb.ObserveRequest) *transportpb.ObserveResponse {
	if !n.loop.isLeader || !n.loop.lease.Active() {
		return &transportpb.ObserveResponse{NotLeader: notLeader(n.loop.leader)}
	}
	f := &n.loop.fwd
	now := n.clock.Now()
	out := &transportpb.ObserveResponse{Elections: make([]*transportpb.ObservedElection, 0, len(req.GetNames()))}
	for _, q := range req.GetNames() {
		name, after := q.GetName(), q.GetAfter()
		subs := f.subs[name]
		if subs == nil {
			subs = map[uint64]time.Time{}
			f.subs[name] = subs
		}
		subs[from] = now
		h := n.loop.elections[name]
		applied := n.fsm.AppliedIndex()
		if after == 0 || !n.covers(h, after) {
			// The current state: what a new observer starts from; for a
			// member that asked for changes, word that they cannot all be
			// shown (it ends its observers with ErrObserveLagged).
			out.Elections = append(out.Elections, &transportpb.ObservedElection{Current: true, Chain: applied,
				Changes: []*transportpb.ElectionState{electionState(n.currentLeader(name))}})
			continue
		}
		e := &transportpb.ObservedElection{Chain: max(after, applied)}
		if h != nil {
			for _, c := range h.changes {
				if c.Index > after {
					e.Changes = append(e.Changes, electionState(c))
				}
			}
		}
		out.Elections = append(out.Elections, e)
	}
	// Subscriptions not refreshed for a while belong to members that stopped
	// observing or went away.
	for name, subs := range f.subs {
		for node, at := range subs {
			if now.Sub(at) > 4*n.fwdWaitCheck() {
				delete(subs, node)
			}
		}
		if len(subs) == 0 {
			delete(f.subs, name)
		}
	}
	return out
}

// fwdPushLeaderChange pushes an applied change to the light members that
// watch its election (leader, loop); the election did not change between
// prev and it (0: unknown here).
func (n *Node) fwdPushLeaderChange(c LeaderChange, prev uint64) {
	subs := n.loop.fwd.subs[c.Name]
	if len(subs) == 0 {
		return
	}
	item := &transportpb.PushItem{Item: &transportpb.PushItem_LeaderChange{LeaderChange: &transportpb.LeaderChangePush{
		Name: c.Name, Prev: prev, Change: electionState(c)}}}
	for node := range subs {
		if !n.isLightNode(node) {
			continue
		}
		if !n.fwdToReply(node, item, nil) {
			n.push(node, item)
		}
	}
}
