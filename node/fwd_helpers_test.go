package node

import (
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node/internal/forward"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// The node's white-box tests of light members reach the forwarding state
// (node/internal/forward) through these.

const electionHistoryLen = forward.HistoryLen

func pushResultItem(cmd *lockfsm.Command, res lockfsm.Result) *transportpb.PushItem {
	return forward.ResultItem(cmd, res, errCode(res.Err))
}

func pushEventItem(ev *lockfsm.Event) *transportpb.PushItem { return forward.EventItem(ev) }

func pushedEvent(e *transportpb.PushEvent) lockfsm.Event { return forward.PushedEvent(e) }

func leaderChangeOf(name string, e *transportpb.ElectionState) LeaderChange {
	return LeaderChange(forward.ChangeOf(name, e))
}

// onFwdStatus applies a status answer as the loop does when it comes back.
func (n *Node) onFwdStatus(sess uint64, seqs []uint64, facts []*transportpb.StatusFact) {
	(*fwdHost)(n).StatusAnswered(sess, seqs, facts)
}

// onObserveReply applies an Observe answer as the loop does when it comes
// back.
func (n *Node) onObserveReply(names []string, afters []uint64, els []*transportpb.ObservedElection) {
	n.fwd.ObserveReply(names, afters, els)
}

// observeOnLeader answers an Observe call in the loop.
func (n *Node) observeOnLeader(from uint64, req *transportpb.ObserveRequest) *transportpb.ObserveResponse {
	return n.fwd.ServeObserve(from, req, n.clock.Now())
}

// fwdProposeOnLeader serves a FwdPropose call in the loop.
func (n *Node) fwdProposeOnLeader(from uint64, cmds [][]byte, reply chan *transportpb.FwdProposeResponse) error {
	return n.fwd.ProposeOnLeader(from, cmds, n.clock.Now(), reply)
}
