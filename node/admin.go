package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/transport"
)

// Operator actions (the admin handler's opt-in): hand leadership to another
// voter, remove a member from the raft configuration.

// TransferLeader hands leadership to voter to, or with to 0 to the most
// caught-up other voter the leader heard from recently, and waits (bounded
// by ctx and two election timeouts) until another node leads. Any member may
// be asked: a node that does not lead asks the leader. It returns the new
// leader. Errors: lockerr.ErrNotMember (to is not a voter), lockerr.ErrUnavailable (no
// leader, or leadership did not move in time: then it may still move),
// lockerr.ErrClosed, ctx's cause.
func (n *Node) TransferLeader(ctx context.Context, to uint64) (uint64, error) {
	if to != 0 && to == n.id && n.Leader() == n.id {
		return n.id, nil
	}
	if n.Leader() != n.id {
		return n.askLeaderToAct(ctx, inspectRequest{Op: "transfer", To: to})
	}
	res := make(chan error, 1)
	old := n.id
	if err := n.do(ctx, func() { res <- n.startTransfer(to) }); err != nil {
		return 0, err
	}
	select {
	case err := <-res:
		if err != nil {
			return 0, err
		}
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*n.cfg.electionTimeout())
	defer cancel()
	t := time.NewTicker(n.cfg.TickInterval)
	defer t.Stop()
	for {
		if l := n.Leader(); l != 0 && l != old {
			return l, nil
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return 0, context.Cause(ctx)
			}
			return 0, fmt.Errorf("%w: leadership did not move within two election timeouts", lockerr.ErrUnavailable)
		case <-n.donec:
			return 0, n.stoppedErr()
		case <-t.C:
		}
	}
}

// startTransfer picks the transferee and starts the transfer (loop).
func (n *Node) startTransfer(to uint64) error {
	if !n.loop.isLeader {
		return fmt.Errorf("%w: leader is %016x", lockerr.ErrNotLeader, n.loop.leader)
	}
	if to == 0 {
		if to = transferee(n.rn.Status(), n.id, true); to == 0 {
			return fmt.Errorf("%w: no other voter was heard from recently", lockerr.ErrUnavailable)
		}
	}
	if to == n.id {
		return nil // already leads; TransferLeader waits for a change that never comes: refuse instead
	}
	if !slices.Contains(n.loop.confState.GetVoters(), to) {
		return fmt.Errorf("%w: %016x is not a voter", lockerr.ErrNotMember, to)
	}
	n.loop.props.flush() // raft drops proposals while a transfer is in progress
	n.rn.TransferLeader(to)
	n.log.Info("leadership transfer requested by an operator", "to", views.MemberID(to))
	return nil
}

// transferLeadership hands leadership to the most caught-up voter and closes
// done when this node no longer leads (or there is no one to hand it to):
// Close and Leave, so that the cluster does not wait an election timeout
// (loop).
func (n *Node) transferLeadership(done chan struct{}) {
	if !n.loop.isLeader {
		close(done)
		return
	}
	best := transferee(n.rn.Status(), n.id, false)
	if best == 0 {
		close(done)
		return
	}
	n.loop.props.flush() // raft drops proposals while a transfer is in progress
	n.rn.TransferLeader(best)
	n.loop.demote = append(n.loop.demote, done) // closed when this node stops leading
}

// transferee is the voter other than self to hand leadership to: the most
// caught-up one, preferring those heard from lately (a transfer to a
// crashed or cut-off voter only times out after two election timeouts).
// RecentActive is reset every election timeout, so right after that reset
// no one may look active: then any is taken, unless recentOnly. 0: none.
func transferee(st raft.Status, self uint64, recentOnly bool) uint64 {
	var best, bestMatch uint64
	var bestActive bool
	for id, pr := range st.Progress {
		if id == self || pr.IsLearner || (recentOnly && !pr.RecentActive) {
			continue
		}
		switch {
		case pr.RecentActive && !bestActive:
		case pr.RecentActive == bestActive && pr.Match >= bestMatch:
		default:
			continue
		}
		best, bestMatch, bestActive = id, pr.Match, pr.RecentActive
	}
	return best
}

// RemoveMember removes voter or learner id from the raft configuration and
// waits until the removal is applied on the leader (bounded by ctx and five
// election timeouts). Any member may be asked: a node that does not lead
// asks the leader (over the peer port: the leader serves only a caller whose
// certificate has the operator role, else lockerr.ErrNotLeader naming the
// leader). The leader itself cannot be removed (transfer leadership first),
// nor a voter whose removal would leave fewer voters the leader heard from
// recently than a quorum of the new configuration (lockerr.ErrRefused). A
// removed member that is still running stops serving (gossip tells it; with
// static members, stop it). Errors: lockerr.ErrNotLeader, lockerr.ErrNotMember,
// lockerr.ErrRefused, lockerr.ErrUnavailable (no leader, another configuration
// change is pending, or the removal was not applied in time: it may still
// apply), lockerr.ErrClosed, ctx's cause.
func (n *Node) RemoveMember(ctx context.Context, id uint64) error {
	if n.Leader() != n.id {
		_, err := n.askLeaderToAct(ctx, inspectRequest{Op: "remove", Member: id})
		return err
	}
	return n.removeHere(ctx, id)
}

// removeHere is RemoveMember on the leader (lockerr.ErrNotLeader elsewhere).
func (n *Node) removeHere(ctx context.Context, id uint64) error {
	wctx, cancel := context.WithTimeout(ctx, 5*n.cfg.electionTimeout())
	defer cancel()
	t := time.NewTicker(n.cfg.TickInterval)
	defer t.Stop()
	// A leader elected a moment ago has not heard from every healthy
	// voter yet: it waits to know before it judges the quorum check.
	for {
		res := make(chan error, 1)
		if err := n.do(ctx, func() { res <- n.proposeOperatorRemoval(id) }); err != nil {
			return err
		}
		var err error
		select {
		case err = <-res:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if !errors.Is(err, errHealthUnknown) {
			if err != nil {
				return err
			}
			break
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("%w: %v", lockerr.ErrUnavailable, err)
		case <-t.C:
		}
	}
	for {
		voters, learners, err := n.ConfState(wctx)
		if err == nil && !slices.Contains(voters, id) && !slices.Contains(learners, id) {
			n.log.Info("member removed by an operator", "id", views.MemberID(id))
			return nil
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("%w: removal of %016x not applied within five election timeouts", lockerr.ErrUnavailable, id)
		case <-n.donec:
			return n.stoppedErr()
		case <-t.C:
		}
	}
}

// errHealthUnknown: the leader has not led long enough to know which voters
// are healthy (RemoveMember waits and asks again).
var errHealthUnknown = errors.New("the voters' health is not known yet")

// proposeOperatorRemoval checks and proposes the removal (loop).
func (n *Node) proposeOperatorRemoval(id uint64) error {
	if !n.loop.isLeader {
		return fmt.Errorf("%w: leader is %016x", lockerr.ErrNotLeader, n.loop.leader)
	}
	cs := n.loop.confState
	isVoter, isLearner := slices.Contains(cs.GetVoters(), id), slices.Contains(cs.GetLearners(), id)
	switch {
	case id == n.id:
		return fmt.Errorf("%w: %016x is the leader; transfer leadership first", lockerr.ErrRefused, id)
	case !isVoter && !isLearner:
		return fmt.Errorf("%w: %016x is not a voter or learner", lockerr.ErrNotMember, id)
	case len(cs.GetVotersOutgoing()) > 0:
		return fmt.Errorf("%w: a configuration change is in progress; retry", lockerr.ErrUnavailable)
	}
	if isVoter {
		st := n.rn.Status()
		healthy := 0
		for _, v := range cs.GetVoters() {
			if pr, ok := st.Progress[v]; v != id && ok && (pr.RecentActive || n.loop.peers.active(v, n.clock.Now())) {
				healthy++
			}
		}
		remaining := len(cs.GetVoters()) - 1
		if healthy < remaining/2+1 && n.loop.peers.young(n.clock.Now()) {
			return fmt.Errorf("%w: this leader was elected less than an election timeout ago", errHealthUnknown)
		}
		if healthy < remaining/2+1 {
			return fmt.Errorf("%w: removing %016x would leave %d healthy of %d voters, below a quorum", lockerr.ErrRefused, id, healthy, remaining)
		}
	}
	if !n.fleet.ClaimRemoval(id, isLearner, time.Now()) {
		return fmt.Errorf("%w: another configuration change is pending; retry", lockerr.ErrUnavailable)
	}
	cc := &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: new(id)}}}
	n.loop.props.flush()
	if err := n.rn.ProposeConfChange(cc); err != nil {
		return fmt.Errorf("%w: %v", lockerr.ErrUnavailable, err)
	}
	n.log.Info("operator removal proposed", "id", views.MemberID(id))
	return nil
}

// actionReply is the leader's answer to a forwarded operator action: the new
// leader of a transfer, or the action's error and its sentinel's code.
type actionReply struct {
	Leader uint64 `json:"leader,omitempty"`
	Err    string `json:"err,omitempty"`
	Code   string `json:"code,omitempty"`
}

func newActionReply(leader uint64, err error) actionReply {
	r := actionReply{Leader: leader}
	if err != nil {
		r.Err, r.Code = err.Error(), adminErrorCode(err)
	}
	return r
}

// askLeaderToAct forwards an operator action (req) to the leader and
// returns its answer. A leader that refuses this member the call (its
// certificate lacks the operator role) is lockerr.ErrNotLeader naming the
// leader: the operator can ask the leader itself.
func (n *Node) askLeaderToAct(ctx context.Context, req inspectRequest) (uint64, error) {
	var out actionReply
	if err := n.askLeader(ctx, req, &out); err != nil {
		if errors.Is(err, transport.ErrPermissionDenied) {
			return 0, fmt.Errorf("%w: leader is %016x, and it takes operator actions only from a member whose certificate has the operator role",
				lockerr.ErrNotLeader, n.Leader())
		}
		return 0, err
	}
	if out.Err != "" {
		return 0, remoteAdminError(out.Code, out.Err)
	}
	return out.Leader, nil
}

// adminErrorCode names the sentinel an admin error wraps, for the wire.
func adminErrorCode(err error) string {
	for code, e := range adminErrors {
		if errors.Is(err, e) {
			return code
		}
	}
	return ""
}

var adminErrors = map[string]error{"not_leader": lockerr.ErrNotLeader, "not_member": lockerr.ErrNotMember, "refused": lockerr.ErrRefused,
	"unavailable": lockerr.ErrUnavailable}

func remoteAdminError(code, msg string) error {
	if e, ok := adminErrors[code]; ok {
		return fmt.Errorf("%w: leader said: %s", e, msg)
	}
	return fmt.Errorf("%w: leader said: %s", lockerr.ErrUnavailable, msg)
}
