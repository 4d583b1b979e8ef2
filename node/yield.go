package node

import (
	"log/slog"
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
// never became a candidate (tick). A light member has no raft to campaign
// with.
func campaignAfterYield(y *campaign.Yield, rn *raft.RawNode, leader uint64, light bool, now time.Time, log *slog.Logger) {
	if !light && y.Ended(now, rn.BasicStatus().GetTerm(), leader) {
		log.Debug("the peer this node stood aside for did not campaign: campaigning")
		_ = rn.Campaign()
	}
}
