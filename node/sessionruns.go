package node

import (
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
)

// A session that ends holding or waiting for many names ends over several
// entries (lockfsm/ending.go): its close or expiry carries a run limit, and
// the leader proposes the next run of its end as each one applies. This
// file is the node's side: the limit, the leader's runs, and this node
// learning that its own session is ending.

// sessionRuns is the leader's record of the runs it proposed (loop).
type sessionRuns struct {
	proposed map[uint64]time.Time // ending session → when its next run was proposed
}

// withRunLimit gives a close or expiry the leader proposes its run limit,
// once every member of the configuration ends sessions in runs (loop,
// leader). Until then the session ends in one entry, as every version
// applies it. Only the leader decides: a follower that believed the gate
// open while the leader knows an older member would have its close refused
// (fleet.AdmitForwarded) again and again.
func (n *Node) withRunLimit(c *lockfsm.Command) {
	if (c.Kind == lockfsm.KindCloseSession || c.Kind == lockfsm.KindExpireSession) && c.Limit == 0 &&
		n.fleet.RunsOpen() {
		c.Limit = uint32(n.cfg.SessionEndRun)
	}
}

// withRunLimitData is withRunLimit for a close another member asked the
// leader to propose (loop, leader): a light member is not in the
// configuration and cannot know whether every member ends sessions in runs,
// and a follower may not have heard from every other member yet.
func (n *Node) withRunLimitData(data []byte) []byte {
	if len(data) < 2 || lockfsm.Kind(data[1]) != lockfsm.KindCloseSession {
		return data
	}
	c, err := lockfsm.DecodeCommand(data)
	if err != nil || c.Limit != 0 || c.Version >= 3 {
		return data
	}
	n.withRunLimit(&c)
	if c.Limit == 0 {
		return data
	}
	c.Version = 0
	return c.AppendEncode(nil)
}

// onSessionEndApplied follows an applied close, expiry or run: the leader
// proposes the session's next run at once while it is still ending (loop).
func (n *Node) onSessionEndApplied(cmd *lockfsm.Command) {
	r := &n.loop.runs
	delete(r.proposed, cmd.Session)
	if n.loop.isLeader && n.fsm.SessionEnding(cmd.Session) {
		n.proposeRun(cmd.Session)
	}
}

// proposeRuns proposes the next run of every ending session whose last
// proposal has not applied within RetryInterval (leader's tick, loop): the
// runs of a session a previous leader was ending, and a lost proposal.
func (n *Node) proposeRuns(now time.Time) {
	if !n.loop.isLeader {
		return
	}
	for _, id := range n.fsm.Ending() {
		if at, ok := n.loop.runs.proposed[id]; !ok || now.Sub(at) >= n.cfg.RetryInterval {
			n.proposeRun(id)
		}
	}
}

func (n *Node) proposeRun(id uint64) {
	r := &n.loop.runs
	if r.proposed == nil {
		r.proposed = map[uint64]time.Time{}
	}
	r.proposed[id] = n.clock.Now()
	n.loop.props.add((&lockfsm.Command{Kind: lockfsm.KindEndSessionRun, Session: id,
		Limit: uint32(n.cfg.SessionEndRun)}).AppendEncode(nil), nil)
}

// onOwnSessionEnding: the cluster began ending this node's session. Its
// commands are refused from now on, and its end is committed: for this node
// it is over as if it had ended. Close returns now (the leader's runs
// release the rest of its names, whether or not this node is still up);
// otherwise its holds are lost and a new session opens.
func (n *Node) onOwnSessionEnding(ev *lockfsm.Event) {
	s := &n.loop.own
	if ev.Session != s.id {
		return
	}
	if s.closing {
		n.onOwnSessionEnded(ev)
		return
	}
	n.log.Warn("session being ended by the cluster; opening a new one", "session", s.id)
	n.resetSession(lockerr.ErrSessionExpired)
}
