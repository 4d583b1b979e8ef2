package simnet

import (
	"strings"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockraft/lockraft/internal/netrules"
	"github.com/lockraft/lockraft/internal/views"
)

// Raft messages arriving
//
// A raft message crosses its link if, when it arrives, the link is up, its
// sender's endpoint is still open, and an endpoint is open under its
// destination id (a restarted node gets what is in flight to its id). The
// link is judged when the message arrives, not when it is sent, because
// arrivals happen when the bubble is quiet: a Partition made at the instant
// a message is sent cannot race with it. A message lost to a cut link, a
// missing endpoint or a wrong address is reported to its sender
// (ReportUnreachable, once per batch), as transport does for a broken
// stream; one lost to the policy's Drop is not, and neither is one whose
// sender closed. What arrives passes the receiver's checks (auth.go) and
// reaches Receive as one batch per link and instant.

// deliverRaft executes one unit of raft messages: one link's messages due
// at one instant.
func (n *Network) deliverRaft(unit []*event) {
	first := unit[0]
	from, to, src := first.from, first.to, first.src
	dst, why := n.reach(src, from, to, "")
	if dst != nil {
		defer dst.leave()
	}

	// report: why the sender is told its peer is unreachable ("": it is not).
	report := ""
	var live []*event
	for _, ev := range unit {
		switch {
		case why == lostSender:
			n.record(dropped(ev, why))
		case ev.lost != "":
			n.record(dropped(ev, ev.lost))
			if ev.lost != lostPolicy && report == "" {
				report = ev.lost
			}
		case why != "":
			n.record(dropped(ev, why))
			report = why
		default:
			live = append(live, ev)
		}
	}
	var refusal error
	if len(live) > 0 {
		if err := dst.authenticate(from, "Stream", first.env, true); err != nil {
			for _, ev := range live {
				r := messageEvent(Refused, from, to, ev.msg)
				r.Code, r.Why = status.Code(err), refusalWhy(err)
				n.record(r)
			}
			report, refusal = refusalWhy(err), err
		} else {
			n.receive(dst, from, live)
		}
	}
	if report != "" {
		n.mu.Lock()
		n.scheduleLocked(&event{at: time.Now(), from: from, to: to, ch: chUnreachable, seq: first.seq,
			kind: evUnreachable, src: src, err: refusal, why: report})
		n.mu.Unlock()
		n.poke()
	}
}

// receive filters the messages as transport's stream does and hands the
// rest to dst's Receive. The caller holds dst.
func (n *Network) receive(dst *Endpoint, from uint64, live []*event) {
	batch := make([]*raftpb.Message, 0, len(live))
	src := views.MemberID(from).String()
	for _, ev := range live {
		m := ev.msg
		if ok, why := netrules.RemoteMessageOK(m, dst.id, from); !ok {
			dst.refused.Refuse(refusedMessage, src, "reason", why, "type", m.GetType().String(),
				"msg_from", views.MemberID(m.GetFrom()), "msg_to", views.MemberID(m.GetTo()))
			r := messageEvent(Refused, from, dst.id, m)
			r.Why = why
			n.record(r)
			continue
		}
		n.record(messageEvent(Delivered, from, dst.id, m))
		batch = append(batch, m)
	}
	if len(batch) > 0 {
		dst.cfg.Handler.Receive(batch)
	}
}

func dropped(ev *event, why string) Event {
	d := messageEvent(Dropped, ev.from, ev.to, ev.msg)
	d.Why = why
	return d
}

// refusalWhy names a refusal for the trace without its details (which may
// carry paths or error texts of the run).
func refusalWhy(err error) string {
	st, _ := status.FromError(err)
	switch {
	case st.Code() == codes.PermissionDenied && strings.HasPrefix(st.Message(), netrules.ClusterMismatchMsg):
		return netrules.ClusterMismatchMsg
	case st.Code() == codes.PermissionDenied && strings.HasPrefix(st.Message(), netrules.FormationMismatchMsg):
		return netrules.FormationMismatchMsg
	}
	return st.Code().String()
}

// reportUnreachable executes a report of a lost message to its sender.
func (n *Network) reportUnreachable(ev *event) {
	n.mu.Lock()
	ok := ev.src.enterLocked()
	n.mu.Unlock()
	if !ok {
		n.record(Event{Kind: Dropped, From: ev.from, To: ev.to, Why: "report to a closed sender"})
		return
	}
	defer ev.src.leave()
	n.record(Event{Kind: Unreachable, From: ev.from, To: ev.to, Why: ev.why})
	if ev.err != nil {
		ev.src.streamRefused(ev.to, ev.err)
	}
	ev.src.cfg.Handler.ReportUnreachable(ev.to)
}
