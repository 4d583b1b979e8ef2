package forward

import (
	"context"
	"slices"
	"time"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// maxStatusQueries bounds the acquires one FwdStatus asks about (the rest
// wait for the next one).
const maxStatusQueries = 1 << 14

// Forward queues an encoded command for the leader.
func (s *State) Forward(data []byte) {
	s.out.add(slices.Clone(data))
}

// Forwarding reports whether forwarded commands are queued or on their way
// (nil-safe: a node not yet started forwards nothing).
func (s *State) Forwarding() bool {
	return s != nil && s.out.busy()
}

// sendForwarded is one FwdPropose call (the sender's goroutine).
func (s *State) sendForwarded(items [][]byte) {
	target := s.Target()
	if target == 0 {
		return // retried on the retry timer
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RetryInterval)
	defer cancel()
	var t0 time.Time
	if s.cfg.Forwarded != nil {
		t0 = time.Now()
	}
	resp, err := s.cfg.Net.FwdPropose(ctx, target, &transportpb.FwdProposeRequest{Commands: items})
	if !t0.IsZero() {
		s.cfg.Forwarded(time.Since(t0))
	}
	if s.answered(target, resp.GetNotLeader(), err) && len(resp.GetItems()) > 0 {
		s.host.Pushed(resp.GetItems())
	}
}

// Open asks target (the leader, or a member that may know it) to open this
// member's session with nonce; the call runs in the background.
func (s *State) Open(nonce, target uint64) {
	ttl := uint64(s.cfg.SessionTTL.Milliseconds())
	s.host.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*s.cfg.RetryInterval)
		defer cancel()
		resp, err := s.cfg.Net.FwdOpen(ctx, target, &transportpb.FwdOpenRequest{Nonce: nonce, TtlMillis: ttl})
		if !s.answered(target, resp.GetNotLeader(), err) || resp.GetSession() == 0 {
			return
		}
		sess := resp.GetSession()
		s.host.Do(func() { s.host.SessionOpened(nonce, sess) })
	})
}

// Tick runs in the retry pass of a light member: find the leader if
// unknown, re-subscribe the observers when due, and ask about queued
// Acquires whose grant may have been missed.
func (s *State) Tick(now time.Time) {
	h := s.host
	if h.Leader() == 0 {
		if now.Sub(s.probeAt) >= s.cfg.RetryInterval {
			s.probeAt = now
			s.out.add(nil) // an empty command: the leader answers, others hint
		}
		return
	}
	s.observeTick(now)
	sess := h.Session()
	if sess == 0 || now.Sub(s.statusAt) < s.cfg.RetryInterval {
		return
	}
	req, seqs, askQueued := s.statusQueries(now, sess)
	if len(seqs) == 0 {
		return
	}
	s.statusAt = now
	if askQueued {
		s.waitedAt = now
	}
	target := h.Leader()
	h.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RetryInterval)
		defer cancel()
		resp, err := s.cfg.Net.FwdStatus(ctx, target, req)
		if !s.answered(target, resp.GetNotLeader(), err) {
			return
		}
		facts := resp.GetFacts()
		h.Do(func() { h.StatusAnswered(sess, seqs, facts) })
	})
}

// statusQueries is the status call due now for session sess: the Acquires
// asked about, in the request's order, and whether the queued ones are
// among them.
func (s *State) statusQueries(now time.Time, sess uint64) (*transportpb.FwdStatusRequest, []uint64, bool) {
	req := &transportpb.FwdStatusRequest{Session: sess}
	var seqs []uint64
	add := func(o Op) {
		if len(seqs) >= maxStatusQueries {
			return // the rest are asked next time
		}
		seqs = append(seqs, o.Seq)
		req.Queries = append(req.Queries, &transportpb.StatusQuery{Seq: o.Seq, Name: o.Name, Owner: o.Owner})
	}
	// Queued Acquires learn their grant by push (L4: waiting costs
	// nothing). Asking is only the safety net for a push that failed while
	// the member and the leader still reach each other (a lost connection
	// makes the member find the leader again, and finding it asks at
	// once), so it is rare: every WaitCheck.
	askQueued := now.Sub(s.waitedAt) >= s.WaitCheck()
	if askQueued {
		s.host.EachQueued(add)
	}
	// Acquires whose result is overdue: their result push may have been
	// lost, and a retry's duplicate result is pushed the same way.
	s.host.EachInflight(func(o Op) {
		if o.Kind == lockfsm.KindAcquire && !o.Parked && !o.Abandoned && !o.FirstProposed.IsZero() &&
			now.Sub(o.FirstProposed) >= s.cfg.RetryInterval {
			add(o)
		}
	})
	return req, seqs, askQueued
}

// ApplyStatus applies the leader's answer about the Acquires seqs of
// session sess (facts, in the same order): an in-flight Acquire whose
// result was lost learns it from the lock table; a queued one learns its
// grant or its end.
func (s *State) ApplyStatus(sess uint64, seqs []uint64, facts []*transportpb.StatusFact) {
	h := s.host
	for i, seq := range seqs {
		if i >= len(facts) {
			return
		}
		st, tok := facts[i].GetState(), facts[i].GetToken()
		if o, ok := h.Inflight(seq); ok && !o.Parked && !o.Abandoned && o.Kind == lockfsm.KindAcquire &&
			st != transportpb.AcquireState_ACQUIRE_STATE_GONE {
			// Its result was lost on the way: the lock table says what it was.
			if st == transportpb.AcquireState_ACQUIRE_STATE_GRANTED {
				h.Relearned(seq, lockfsm.Result{Status: lockfsm.Granted, Token: tok, Duplicate: true})
			} else {
				h.Relearned(seq, lockfsm.Result{Status: lockfsm.Queued})
			}
			continue
		}
		o, ok := h.Queued(seq)
		if !ok {
			continue
		}
		switch st {
		case transportpb.AcquireState_ACQUIRE_STATE_GRANTED:
			h.StatusEvent(&lockfsm.Event{Kind: lockfsm.EventGranted, Session: sess, Seq: seq, Name: o.Name,
				Owner: o.Owner, Token: tok, FromQueue: true})
		case transportpb.AcquireState_ACQUIRE_STATE_GONE:
			h.StatusEvent(&lockfsm.Event{Kind: lockfsm.EventWaitEnded, Session: sess, Seq: seq, Name: o.Name,
				Owner: o.Owner, Reason: lockfsm.ReasonSessionExpired})
		}
	}
}
