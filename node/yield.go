package node

import (
	"log/slog"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/node/internal/campaign"
)

// Standing aside for a peer's campaign (node/internal/campaign): the loop
// tells the Yield of every pre-vote raft grants, drops the pre-vote grants
// that reach this node while it stands aside (stepRemote), and campaigns at
// once if the peer never became a candidate (onTick).

// noteGrantedPreVotes looks for pre-vote grants among the responses raft
// sends once its append is durable (a MsgStorageAppend's Responses).
func noteGrantedPreVotes(y *campaign.Yield, rn *raft.RawNode, self uint64, m *raftpb.Message, now time.Time, log *slog.Logger) {
	for _, r := range m.GetResponses() {
		if r.GetType() != raftpb.MessageType_MsgPreVoteResp || r.GetReject() {
			continue
		}
		st := rn.BasicStatus()
		if y.Granted(now, self, r.GetTo(), st.GetTerm(), st.RaftState == raft.StatePreCandidate) {
			log.Debug("standing aside for a peer's campaign", "peer", views.MemberID(r.GetTo()), "term", st.GetTerm(), "for", y.For)
		}
	}
}

// campaignAfterYield campaigns if standing aside ran out while the peer
// never became a candidate (tick), and this node may campaign (canCampaign):
// a light member has no raft to campaign with, and raft refuses a campaign
// from a member that is not a voter of its configuration or is restoring a
// snapshot, with a WARN ("is unpromotable and can not campaign") in a
// normal lifecycle: a founder not yet configured grants a peer's pre-vote
// as readily as any.
func campaignAfterYield(y *campaign.Yield, rn *raft.RawNode, leader uint64, canCampaign bool, now time.Time, log *slog.Logger) {
	if y.Ended(now, rn.BasicStatus().GetTerm(), leader) && canCampaign {
		log.Debug("the peer this node stood aside for did not campaign: campaigning")
		_ = rn.Campaign()
	}
}

// promotable is raft's test for a campaign, from what the loop knows: a
// voter of its configuration (incoming or outgoing) with no snapshot being
// restored, and not a light member.
func (n *Node) promotable() bool {
	cs := n.loop.confState
	return !n.light() && n.loop.jobs.restore == nil &&
		(slices.Contains(cs.GetVoters(), n.id) || slices.Contains(cs.GetVotersOutgoing(), n.id))
}
