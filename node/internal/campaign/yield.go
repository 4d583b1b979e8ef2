// Package campaign keeps two members from campaigning at once.
//
// raft's pre-vote grants freely: a member that has not voted in the next
// term grants every pre-vote whose log is up to date, even while it is a
// pre-candidate itself. So two members whose election timeouts run out
// within a message delay of each other both collect their pre-votes, both
// become candidates, both vote for themselves, and the vote is split:
// nobody leads until another randomised timeout (one to two election
// timeouts) runs out, and it can split again. The same happens when a
// member grants a peer's pre-vote and its own timeout runs out before the
// peer's vote request arrives. The leader-churn profile in the simulation
// (chaos TestSimulationLeaderChurn) found a split vote behind nearly every
// leaderless stretch over two election timeouts.
//
// A Yield settles it the way a polite crowd settles a doorway: a member that
// grants a peer's pre-vote stands aside for a moment if it is not itself
// campaigning (the peer was first), or if it is and the peer has the lower
// id (a tie between campaigns that started together). Standing aside means
// dropping the pre-vote grants that reach it for For: it cannot collect a
// quorum of pre-votes, so it never becomes a candidate beside the peer, and
// it votes for the peer when the peer's vote request comes. The peer, which
// does not stand aside for a member with a higher id, goes ahead.
//
// Dropping messages is always safe in raft: every one may be lost. It
// changes no vote, no term and no lease: the CheckQuorum lease, the
// pre-vote's log check and S5 (the holder's deadline, on its own clock)
// are as before. What it could cost is liveness, if the peer cannot win
// after all (its pre-vote refused by others, a partition): so when the
// moment ends with raft still in the term it began in (the peer never
// became a candidate: its vote request would have moved this member to the
// next term) and no leader known, the member campaigns at once (Ended)
// rather than waiting out another election timeout.
package campaign

import (
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// Yield is one member's standing aside. The zero value with For set is
// ready; its owner (the node's loop) calls every method from one goroutine.
type Yield struct {
	// For is how long the member stands aside: time for the peer to collect
	// its pre-votes, become a candidate and send its vote request (a tick
	// interval).
	For time.Duration

	until time.Time // zero: not standing aside
	term  uint64    // raft's term when it began
	to    uint64    // the peer it stands aside for
}

// Granted tells the Yield that raft granted peer `to` a pre-vote (an
// outgoing MsgPreVoteResp without Reject), raft being at term `term`,
// campaigning (a pre-candidate) or not. It reports whether the member now
// stands aside.
func (y *Yield) Granted(now time.Time, self, to, term uint64, campaigning bool) bool {
	if y.For <= 0 || to == 0 || to == self || (campaigning && to > self) {
		return false
	}
	if y.until.After(now) && y.to < to {
		return true // already standing aside, for a peer with a lower id
	}
	y.until, y.term, y.to = now.Add(y.For), term, to
	return true
}

// Drop reports whether an incoming message is dropped: a pre-vote grant
// while the member stands aside.
func (y *Yield) Drop(now time.Time, m *raftpb.Message) bool {
	return m.GetType() == raftpb.MessageType_MsgPreVoteResp && !m.GetReject() && y.until.After(now)
}

// Ended reports, once per standing aside, that it ran out with raft still
// at the term it began in (the peer never became a candidate) and no
// leader: the member should campaign now.
func (y *Yield) Ended(now time.Time, term, leader uint64) bool {
	if y.until.IsZero() || y.until.After(now) {
		return false
	}
	ended := term == y.term && leader == 0
	y.until = time.Time{}
	return ended
}

// Standing reports whether the member stands aside now, and for whom.
func (y *Yield) Standing(now time.Time) (uint64, bool) {
	return y.to, y.until.After(now)
}
