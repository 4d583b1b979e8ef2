package node

import (
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// Standing aside for a peer's campaign (node/internal/campaign): the loop
// tells the Yield of every pre-vote raft grants, drops the pre-vote grants
// that reach this node while it stands aside, and campaigns at once if the
// peer never became a candidate.

// noteGrantedPreVotes looks for pre-vote grants among the responses raft
// sends once its append is durable (a MsgStorageAppend's Responses).
func (n *Node) noteGrantedPreVotes(m *raftpb.Message, now time.Time) {
	for _, r := range m.GetResponses() {
		if r.GetType() != raftpb.MessageType_MsgPreVoteResp || r.GetReject() {
			continue
		}
		st := n.rn.BasicStatus()
		if n.loop.yield.Granted(now, n.id, r.GetTo(), st.GetTerm(), st.RaftState == raft.StatePreCandidate) {
			n.log.Debug("standing aside for a peer's campaign", "peer", r.GetTo(), "term", st.GetTerm(), "for", n.loop.yield.For)
		}
	}
}

// campaignAfterYield campaigns if standing aside ran out while the peer
// never became a candidate (tick).
func (n *Node) campaignAfterYield(now time.Time) {
	if n.loop.yield.Ended(now, n.rn.BasicStatus().GetTerm(), n.loop.leader) && !n.light() {
		n.log.Debug("the peer this node stood aside for did not campaign: campaigning")
		_ = n.rn.Campaign()
	}
}
