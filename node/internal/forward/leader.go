package forward

import (
	"context"
	"time"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/transport/transportpb"
)

type openKey struct{ node, nonce uint64 }

// pendingOpen is a light member's FwdOpen waiting for its OpenSession to
// be applied.
type pendingOpen struct {
	at      time.Time
	waiters []chan *transportpb.FwdOpenResponse
}

// BecomeLeader starts the leader's side: it rebuilds which sessions belong
// to light members.
func (s *State) BecomeLeader() {
	s.leading = true
	clear(s.remote)
	for _, si := range s.cfg.Table.Sessions() {
		if s.isLight(si.Node) {
			s.remote[si.Session] = si.Node
		}
	}
}

// StepDown ends the leader's side: held replies are answered with what
// they have, pending opens with the leader's hint (the caller asks the new
// leader).
func (s *State) StepDown() {
	s.leading = false
	s.expireReplies(time.Time{}, true)
	for k, p := range s.opens {
		for _, w := range p.waiters {
			w <- &transportpb.FwdOpenResponse{NotLeader: notLeader(s.host.Leader())}
		}
		delete(s.opens, k)
	}
}

// isLight reports whether id is a light member: a member other than this
// node, outside the raft configuration.
func (s *State) isLight(id uint64) bool {
	if id == 0 || id == s.cfg.ID {
		return false
	}
	return !s.host.InConfig(id)
}

// OnResult pushes the result of a light member's command (leader, apply).
func (s *State) OnResult(cmd *lockfsm.Command, res lockfsm.Result) {
	if !s.leading || cmd.Session == 0 {
		return
	}
	node, ok := s.remote[cmd.Session]
	if cmd.Kind == lockfsm.KindCloseSession {
		if c, asked := s.closers[cmd.Session]; asked {
			node, ok = c, true
			delete(s.closers, cmd.Session)
		}
	}
	if !ok || !s.isLight(node) {
		return
	}
	item := ResultItem(cmd, res, s.cfg.ErrCode(res.Err))
	if !s.toReply(node, item, cmd) {
		s.push(node, item)
	}
}

// OnEvent keeps the remote-session map, answers pending opens and pushes
// a light member's events (leader, apply). Election changes go their own
// way (OnLeaderChange).
func (s *State) OnEvent(ev *lockfsm.Event) {
	if !s.leading {
		return
	}
	switch ev.Kind {
	case lockfsm.EventSessionOpened:
		if s.isLight(ev.Node) {
			s.remote[ev.Session] = ev.Node
		}
		k := openKey{ev.Node, ev.Seq}
		if p := s.opens[k]; p != nil {
			for _, w := range p.waiters {
				w <- &transportpb.FwdOpenResponse{Session: ev.Session}
			}
			delete(s.opens, k)
		}
		return
	}
	if ev.Kind == lockfsm.EventLeader {
		return // to the members that observe it (OnLeaderChange)
	}
	node, ok := s.remote[ev.Session]
	if !ok {
		return
	}
	if ev.Kind == lockfsm.EventSessionEnded {
		delete(s.remote, ev.Session)
	}
	if ev.Kind == lockfsm.EventGranted && !ev.FromQueue {
		return // the member learns an immediate grant from the Acquire's result
	}
	if s.isLight(node) {
		item := EventItem(ev)
		if !s.toReply(node, item, nil) {
			s.push(node, item)
		}
	}
}

// push queues item for light member node's sender.
func (s *State) push(node uint64, item *transportpb.PushItem) {
	b := s.pushers[node]
	if b == nil {
		b = &sender[*transportpb.PushItem]{send: func(items []*transportpb.PushItem) {
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RetryInterval)
			defer cancel()
			_, _ = s.cfg.Net.FwdPush(ctx, node, &transportpb.FwdPushRequest{Items: items})
		}, run: s.host.Go, stop: s.cfg.Stop}
		s.pushers[node] = b
	}
	s.pushesSent++
	b.add(item)
}

// PushesSent counts the results and events this node pushed to light
// members (as leader).
func (s *State) PushesSent() uint64 { return s.pushesSent }

// OpenOnLeader serves a light member's FwdOpen (its TTL checked): it
// proposes the member's OpenSession, again if RetryInterval passed since
// the last, and answers reply once it is applied (OnEvent), or at once
// with a hint if this node does not lead.
func (s *State) OpenOnLeader(from, nonce, ttl uint64, now time.Time, reply chan *transportpb.FwdOpenResponse) {
	if !s.leading {
		reply <- &transportpb.FwdOpenResponse{NotLeader: notLeader(s.host.Leader())}
		return
	}
	k := openKey{from, nonce}
	p := s.opens[k]
	if p == nil || now.Sub(p.at) >= s.cfg.RetryInterval {
		if p == nil {
			p = &pendingOpen{}
			s.opens[k] = p
		}
		p.at = now
		c := lockfsm.Command{Kind: lockfsm.KindOpenSession, Node: from, TTLMillis: ttl, Seq: nonce}
		s.host.Propose(c.AppendEncode(nil))
	}
	p.waiters = append(p.waiters, reply)
}

// ServeStatus answers a light member's FwdStatus from the leader's lock
// table, which is complete only once the leader is ready (its term's first
// entry applied), and only about the caller's own session (else the
// error).
func (s *State) ServeStatus(from uint64, req *transportpb.FwdStatusRequest) (*transportpb.FwdStatusResponse, error) {
	if !s.leading || !s.host.Ready() {
		return &transportpb.FwdStatusResponse{NotLeader: notLeader(0)}, nil
	}
	sess := req.GetSession()
	if err := s.host.CheckOwner(from, sess); err != nil {
		return nil, err
	}
	out := &transportpb.FwdStatusResponse{Facts: make([]*transportpb.StatusFact, 0, len(req.GetQueries()))}
	alive := s.host.SessionOpen(sess)
	for _, q := range req.GetQueries() {
		st, tok := transportpb.AcquireState_ACQUIRE_STATE_QUEUED, uint64(0)
		if alive {
			st = transportpb.AcquireState_ACQUIRE_STATE_GONE
			if li, ok := s.cfg.Table.Lock(q.GetName()); ok {
				if t := GrantedTo(li, sess, q.GetOwner(), q.GetSeq()); t != 0 {
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

// GrantedTo is the token of the hold in li that the acquire (session, seq)
// of owner created, or 0.
func GrantedTo(li lockfsm.LockInfo, session uint64, owner string, seq uint64) uint64 {
	for _, h := range li.Holds {
		if h.Session == session && h.Owner == owner && h.GrantSeq == seq && seq != 0 {
			return h.Token
		}
	}
	return 0
}
