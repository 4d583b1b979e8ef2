package forward

// Observing elections from a light member: the Observe call subscribes the
// member to names with the leader and fetches what it missed; each later
// change comes as a LeaderChangePush item of the member's push queue
// (accepted, as every push, only from the leader the member follows).

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// Change is one state of an election: who leads it from the entry Index
// on (Token 0: nobody). It has the fields of the node's LeaderChange, in
// the same order, so that each converts to the other.
type Change struct {
	Name    string
	Index   uint64
	Session uint64
	Owner   string
	Token   uint64
	Value   string
}

// WrongKind is lockerr.ErrWrongKind, naming the kind, when t has name in
// use as another kind of lock than an election (held, waited for, or in its
// lock-delay), as every call of the wrong kind is refused; nil otherwise.
func WrongKind(t Table, name string) error {
	if li, ok := t.Lock(name); ok && li.Primitive != lockfsm.PrimElection {
		return fmt.Errorf("%w: %q is a %v, not an election", lockerr.ErrWrongKind, name, li.Primitive)
	}
	return nil
}

// CurrentLeader reads the election name's current state from t.
func CurrentLeader(t Table, name string) Change {
	c := Change{Name: name, Index: t.AppliedIndex()}
	if li, ok := t.Leader(name); ok {
		c.Session, c.Owner, c.Token, c.Value = li.Holder.Session, li.Holder.Owner, li.Token, li.Value
	}
	return c
}

func electionState(c Change) *transportpb.ElectionState {
	return &transportpb.ElectionState{Index: c.Index, Session: c.Session, Owner: []byte(c.Owner), Token: c.Token,
		Value: []byte(c.Value)}
}

// ChangeOf is the change of election name that e carries.
func ChangeOf(name string, e *transportpb.ElectionState) Change {
	return Change{Name: name, Index: e.GetIndex(), Session: e.GetSession(), Owner: string(e.GetOwner()),
		Token: e.GetToken(), Value: string(e.GetValue())}
}

// ObserveNow subscribes the member's observers with the leader now (a new
// name is watched).
func (s *State) ObserveNow(now time.Time) {
	s.observeDue = true
	s.observeTick(now)
}

// watch is one name in an Observe call.
type watch struct {
	name  string
	after uint64 // the changes after it are asked for (0: the current state)
}

// observeTick (member): subscribe again with the leader (a new leader, a
// gap, a new name, or every WaitCheck as a safety net for a push that
// failed while nothing else changed).
func (s *State) observeTick(now time.Time) {
	h := s.host
	target := h.Leader()
	if !h.Light() || target == 0 || s.observeBusy {
		return
	}
	if !s.observeDue && now.Sub(s.observeAt) < s.WaitCheck() {
		return
	}
	var ws []watch
	h.EachWatched(func(name string, known bool, chain uint64) {
		w := watch{name: name}
		if known {
			w.after = chain
		}
		ws = append(ws, w)
	})
	if len(ws) == 0 {
		return
	}
	s.observeDue, s.observeAt, s.observeBusy = false, now, true
	slices.SortFunc(ws, func(a, b watch) int { return strings.Compare(a.name, b.name) })
	names := make([]string, len(ws))
	afters := make([]uint64, len(ws))
	req := &transportpb.ObserveRequest{Names: make([]*transportpb.ObserveName, 0, len(ws))}
	for i, w := range ws {
		names[i], afters[i] = w.name, w.after
		req.Names = append(req.Names, &transportpb.ObserveName{Name: w.name, After: w.after})
	}
	h.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RetryInterval)
		defer cancel()
		resp, err := s.cfg.Net.Observe(ctx, target, req)
		ok := s.answered(target, resp.GetNotLeader(), err)
		h.Do(func() {
			s.observeBusy = false
			if !ok {
				s.observeDue = true
				return
			}
			s.ObserveReply(names, afters, resp.GetElections())
		})
	})
}

// ObserveReply applies the leader's answer for names, asked with the
// changes after afters (0: the current state) (member): one election per
// name asked, in order. A current state given where changes were asked
// for means the leader cannot show them all: the observers are told
// (Lagged), never given the state in their place.
func (s *State) ObserveReply(names []string, afters []uint64, els []*transportpb.ObservedElection) {
	h := s.host
	if !h.Light() {
		return // promoted meanwhile: this node applies the changes itself
	}
	for i, name := range names {
		if i >= len(els) {
			return
		}
		e := els[i]
		known, _, ok := h.Watched(name)
		if !ok {
			continue
		}
		switch {
		case afters[i] != 0 && !known:
			// The observers asked for were ended meanwhile: ask afresh.
			s.observeDue = true
			continue
		case afters[i] != 0 && e.GetCurrent():
			h.Lagged(name)
			continue
		case afters[i] == 0 && (known || !e.GetCurrent()):
			continue // answered meanwhile, or not an answer to this question
		}
		for _, st := range e.GetChanges() {
			c := ChangeOf(name, st)
			if afters[i] == 0 || c.Index > afters[i] {
				h.Deliver(c)
			}
		}
		h.Known(name, e.GetChain())
	}
}

// ObservePush handles one pushed change (member): in order if nothing
// changed between the last change the member has and it (its Prev is at or
// before the member's chain), a duplicate if it does not come after the
// chain, else a gap: the member asks the leader for what is missing, and
// ObservePush reports true.
func (s *State) ObservePush(p *transportpb.LeaderChangePush, now time.Time) (gap bool) {
	h := s.host
	if !h.Light() {
		return false
	}
	known, chain, ok := h.Watched(p.GetName())
	if !ok || !known || p.GetChange() == nil {
		return false
	}
	c := ChangeOf(p.GetName(), p.GetChange())
	switch {
	case c.Index <= chain:
		return false // a duplicate
	case p.GetPrev() != 0 && p.GetPrev() <= chain:
		h.Deliver(c)
		return false
	}
	s.ObserveNow(now)
	return true
}

// ServeObserve answers a light member's Observe (leader): each name's
// changes after the member's chain index (or its current state), and a
// subscription to the later ones.
func (s *State) ServeObserve(from uint64, req *transportpb.ObserveRequest, now time.Time) *transportpb.ObserveResponse {
	if !s.leading || !s.host.Ready() {
		return &transportpb.ObserveResponse{NotLeader: notLeader(s.host.Leader())}
	}
	out := &transportpb.ObserveResponse{Elections: make([]*transportpb.ObservedElection, 0, len(req.GetNames()))}
	for _, q := range req.GetNames() {
		name, after := q.GetName(), q.GetAfter()
		subs := s.subs[name]
		if subs == nil {
			subs = map[uint64]time.Time{}
			s.subs[name] = subs
		}
		subs[from] = now
		h := s.elections[name]
		applied := s.cfg.Table.AppliedIndex()
		if after == 0 || !s.covers(h, after) {
			// The current state: what a new observer starts from; for a
			// member that asked for changes, word that they cannot all be
			// shown (it ends its observers with ErrObserveLagged).
			out.Elections = append(out.Elections, &transportpb.ObservedElection{Current: true, Chain: applied,
				Changes: []*transportpb.ElectionState{electionState(CurrentLeader(s.cfg.Table, name))}})
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
	for name, subs := range s.subs {
		for node, at := range subs {
			if now.Sub(at) > 4*s.WaitCheck() {
				delete(subs, node)
			}
		}
		if len(subs) == 0 {
			delete(s.subs, name)
		}
	}
	return out
}

// pushLeaderChange pushes an applied change to the light members that
// watch its election (leader); the election did not change between prev
// and it (0: unknown here).
func (s *State) pushLeaderChange(c Change, prev uint64) {
	subs := s.subs[c.Name]
	if len(subs) == 0 {
		return
	}
	item := &transportpb.PushItem{Item: &transportpb.PushItem_LeaderChange{LeaderChange: &transportpb.LeaderChangePush{
		Name: c.Name, Prev: prev, Change: electionState(c)}}}
	for node := range subs {
		if !s.isLight(node) {
			continue
		}
		if !s.toReply(node, item, nil) {
			s.push(node, item)
		}
	}
}
