package node

import (
	"context"
	"encoding/binary"
	"slices"
	"time"
)

// Observing elections from a light member (observe.go): "fwd-observe"
// subscribes the member to names with the leader and fetches what it missed;
// each later change comes as an 'l' item of the member's fwd-push queue.

const methodObserve = "fwd-observe"

// fwd-observe reply flags, per name.
const (
	observeHistory = 0 // the changes after the member's chain index follow
	observeCurrent = 1 // the leader's history does not reach back: the current state follows
)

func appendChange(b []byte, c LeaderChange) []byte {
	b = binary.AppendUvarint(b, c.Index)
	b = binary.AppendUvarint(b, c.Session)
	b = appendStr(b, c.Owner)
	b = binary.AppendUvarint(b, c.Token)
	return appendStr(b, c.Value)
}

func readChange(r *uvReader, name string) LeaderChange {
	c := LeaderChange{Name: name, Index: r.u(), Session: r.u()}
	c.Owner = r.s()
	c.Token = r.u()
	c.Value = r.s()
	return c
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
	var req []byte
	names := make([]string, 0, len(n.loop.observe))
	for name := range n.loop.observe {
		names = append(names, name)
	}
	slices.Sort(names)
	req = binary.AppendUvarint(req, uint64(len(names)))
	for _, name := range names {
		ob := n.loop.observe[name]
		req = appendStr(req, name)
		chain := ob.chain
		if !ob.known {
			chain = 0
		}
		req = binary.AppendUvarint(req, chain)
	}
	n.bgwg.Add(1)
	go func() {
		defer n.bgwg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RetryInterval)
		defer cancel()
		resp, err := n.tr.Call(ctx, target, methodObserve, req)
		ok := n.fwdReply(target, resp, err)
		_ = n.do(context.Background(), func() {
			f.observeBusy = false
			if !ok {
				f.observeDue = true
				return
			}
			n.onObserveReply(names, resp[1:])
		})
	}()
}

// onObserveReply applies the leader's answer for names (member, loop).
func (n *Node) onObserveReply(names []string, b []byte) {
	r := uvReader{b: b, ok: true}
	for _, name := range names {
		if len(r.b) == 0 {
			return
		}
		flag := r.b[0]
		r.b = r.b[1:]
		chain := r.u()
		k := r.u()
		if !r.ok || k > uint64(len(r.b)) {
			return
		}
		ob := n.loop.observe[name]
		for i := uint64(0); i < k; i++ {
			c := readChange(&r, name)
			if !r.ok || ob == nil {
				continue
			}
			switch {
			case flag == observeCurrent:
				if !ob.known || !c.same(ob.last) {
					n.deliver(ob, c)
				}
			case c.Index > ob.chain || !ob.known:
				n.deliver(ob, c)
			}
		}
		if ob != nil {
			ob.known = true
			ob.chain = chain
		}
	}
}

// onLeaderChangePush handles one pushed change (member, loop): in order if
// it follows the last change the member has, a duplicate if it does not come
// after it, else a gap: ask the leader for what is missing.
func (n *Node) onLeaderChangePush(b []byte) {
	r := uvReader{b: b, ok: true}
	name := r.s()
	prev := r.u()
	c := readChange(&r, name)
	ob := n.loop.observe[name]
	if !r.ok || ob == nil || !ob.known {
		return
	}
	switch {
	case c.Index <= ob.chain:
		return // a duplicate
	case prev == ob.chain:
		ob.chain = c.Index
		n.deliver(ob, c)
	default:
		n.observeGaps.Add(1)
		n.loop.fwd.observeDue = true
		n.fwdObserveTick(n.clock.Now())
	}
}

// handleObserve serves fwd-observe on the leader: each name's changes after
// the member's chain index (or its current state), and a subscription to
// the later ones.
func (n *Node) handleObserve(ctx context.Context, from uint64, req []byte) ([]byte, error) {
	reply := make(chan []byte, 1)
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

func (n *Node) observeOnLeader(from uint64, req []byte) []byte {
	if !n.loop.isLeader || !n.loop.lead.active {
		return notLeaderReply(n.loop.leader)
	}
	f := &n.loop.fwd
	now := n.clock.Now()
	r := uvReader{b: req, ok: true}
	k := r.u()
	if !r.ok || k > uint64(len(req)) {
		return notLeaderReply(0)
	}
	out := []byte{fwdOK}
	for i := uint64(0); i < k; i++ {
		name := r.s()
		after := r.u()
		if !r.ok {
			break
		}
		subs := f.subs[name]
		if subs == nil {
			subs = map[uint64]time.Time{}
			f.subs[name] = subs
		}
		subs[from] = now
		h := n.loop.elections[name]
		var chain uint64
		if h != nil && len(h.changes) > 0 {
			chain = h.changes[len(h.changes)-1].Index
		}
		start := -1
		if h != nil && after != 0 {
			for j, c := range h.changes {
				if c.Index == after {
					start = j + 1
					break
				}
			}
		}
		if start < 0 {
			cur := n.currentLeader(name)
			if chain != 0 {
				cur.Index = chain
			}
			out = append(out, observeCurrent)
			out = binary.AppendUvarint(out, chain)
			out = binary.AppendUvarint(out, 1)
			out = appendChange(out, cur)
			continue
		}
		out = append(out, observeHistory)
		out = binary.AppendUvarint(out, chain)
		out = binary.AppendUvarint(out, uint64(len(h.changes)-start))
		for _, c := range h.changes[start:] {
			out = appendChange(out, c)
		}
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
// watch its election (leader, loop); prev is the index of the change before
// it (0: unknown here).
func (n *Node) fwdPushLeaderChange(c LeaderChange, prev uint64) {
	subs := n.loop.fwd.subs[c.Name]
	if len(subs) == 0 {
		return
	}
	item := []byte{'l'}
	item = appendStr(item, c.Name)
	item = binary.AppendUvarint(item, prev)
	item = appendChange(item, c)
	for node := range subs {
		if !n.isLightNode(node) {
			continue
		}
		if !n.fwdToReply(node, item, nil) {
			n.push(node, item)
		}
	}
}
