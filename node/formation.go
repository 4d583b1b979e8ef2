package node

// Forming a cluster by gossip: never two.
//
// A count of visible members cannot decide who forms a cluster: a fleet that
// starts as two islands (a partition, seeds that form islands) of three sees
// three members on each side, and each island would bootstrap its own cluster
// with the same ClusterID, granting the same names; when the islands met,
// each leader would tell the other's members they were removed. The rule
// here needs a fixed denominator instead: the operator names the founders
// (GossipConfig.Founders, gossip names, the same list on every member; on
// Kubernetes the first pods of the StatefulSet), and a cluster is formed only
// with every one of them.
//
// The rule.
//
//  1. Formation ids. A formed cluster has an identity: a random formation id
//     made when it is formed. A node holds at most one, written to its
//     identity file (identity.go, fsync and directory fsync) before it is
//     used, and never changes it. Every RPC carries the sender's id, and the
//     receiver refuses another id (transport/formation.go, for every stream,
//     snapshot and call). A node without one adopts the id of the first raft
//     traffic it accepts (it is being added to that cluster), and adopts only
//     while it has no raft data.
//  2. Only founders found, and only with all of them. The candidate is the
//     founder whose name sorts first (membership.PlanFormation). When gossip
//     shows it every founder alive and no member with raft data, it takes a
//     formation id F (its own if it has one, e.g. after a restart part-way,
//     else a new random one, written first), and asks every other founder,
//     by a direct call, to adopt F. A founder adopts (writes F, then answers)
//     only if it has no raft data, its founders list equals the candidate's,
//     it is the node the candidate meant (gossip name and raft id), and it
//     holds no formation id or F already; otherwise it refuses, and says why.
//  3. Only after every founder answered "adopted F" does the candidate
//     bootstrap raft, with the founders' raft ids as the voters.
//
// Why two formed clusters are impossible. A formation F is bootstrapped only
// after every founder adopted F (2, 3). Suppose formations F and G ≠ F were
// both bootstrapped. Then every founder adopted both F and G. A node holds
// one formation id per identity file and never replaces it (1), so every
// founder's data directory was lost between its two adoptions. In words: two
// clusters need the data directories of *all* founders to be lost after the
// first one formed. Nothing else gives it:
//   - Restarts. A restart keeps the identity file, so a founder keeps its
//     answer, and the candidate keeps its F: a restart part-way through
//     step 2 repeats the same question, and a restart after step 3 finds raft
//     data and never bootstraps again.
//   - A wiped data directory. The node comes back as a new member (new raft
//     id, no formation id). As a founder it may adopt again, but the others
//     still hold their answer, so a new formation needs every founder wiped
//     (above). A wiped candidate that finds founders bound to an F it no
//     longer knows cannot form: one cluster or none, never two; the log says
//     so and which founders to look at.
//   - A stale or non-transitive gossip view. Gossip only says whom to ask and
//     when; the answers come from the founders themselves over direct calls,
//     and each founder's answer is durable before it is sent. A wrong view
//     (a founder's old address or raft id, a member's data not yet
//     announced) can only make a question fail or go unasked: the candidate
//     checks that the node that answered is the founder it meant.
//   - Two candidates. Only the first founder name is one, but safety does not
//     rest on that: every founder answers at most one formation, and each
//     formation needs all of them. (One candidate is what keeps the answers
//     from splitting, which would leave none formed.)
//   - Misconfigured lists. A founder adopts only for a candidate whose list
//     equals its own. Two formations therefore need two founding sets with no
//     founder in common, each configured so on all its members: that is two
//     clusters by configuration, and rule 1 keeps them apart for good.
// Rule 1 also makes the guarantee outlast formation: two formed clusters
// that share a ClusterID (by configuration, or after every founder was
// wiped) never merge, never exchange raft traffic, and never tell each
// other's members they were removed: a member with another formation id is
// foreign, ignored and logged once (reconcile).
//
// BootstrapExpect 1 without Founders is the single-node development mode: the
// node is its own only founder. Two such nodes are two clusters by
// configuration.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// formationRequest is the candidate's question to one founder (the typed
// Form call carries it).
type formationRequest struct {
	formation string
	candidate string   // the candidate's gossip name
	founders  []string // the candidate's founders list, sorted
	target    string   // the founder asked: gossip name
	targetID  uint64   // and raft id, as the candidate's gossip view says
}

func (r *formationRequest) proto() *transportpb.FormRequest {
	return &transportpb.FormRequest{Formation: r.formation, Candidate: r.candidate, Founders: r.founders,
		Target: r.target, TargetId: r.targetID}
}

// Bounds on what a founder accepts to read from a candidate.
const (
	maxFounders      = 64
	maxFormationText = 1024
)

func formationRequestFrom(p *transportpb.FormRequest) (formationRequest, error) {
	r := formationRequest{formation: p.GetFormation(), candidate: p.GetCandidate(), founders: p.GetFounders(),
		target: p.GetTarget(), targetID: p.GetTargetId()}
	if len(r.founders) > maxFounders {
		return r, fmt.Errorf("formation request: %d founders", len(r.founders))
	}
	for _, s := range append([]string{r.formation, r.candidate, r.target}, r.founders...) {
		if len(s) > maxFormationText {
			return r, errors.New("formation request: a name or id is too long")
		}
	}
	return r, nil
}

// formationReply is a founder's answer.
type formationReply struct {
	adopted bool
	name    string // the answering node's gossip name
	id      uint64 // and raft id
	reason  string // why it refused
}

// newFormationID makes a random formation id: 32 hex digits.
func newFormationID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// formation returns this node's formation id ("" if none yet).
func (n *Node) formation() string {
	n.formMu.Lock()
	defer n.formMu.Unlock()
	return n.formationID
}

// adoptFormation makes id this node's formation id for good: it is written to
// the identity file (durably) before anything uses it. It refuses when the
// node already has another id, or raft data (which could only be of a
// cluster without formation ids). The transport calls it (AdoptFormation)
// when a formed cluster adds this node, and then records the id itself;
// node-side callers use joinFormation.
func (n *Node) adoptFormation(id string) error {
	n.formMu.Lock()
	defer n.formMu.Unlock()
	switch {
	case n.formationID == id:
		return nil
	case n.formationID != "":
		return fmt.Errorf("this node belongs to formation %s", n.formationID)
	case !validFormationID(id):
		return fmt.Errorf("malformed formation id %q", id)
	case n.storage.HasState():
		return errors.New("this node has raft data of a cluster without a formation id")
	}
	if err := writeIdentity(n.cfg.DataDir, identity{id: n.id, cluster: n.cfg.ClusterID, formation: id}); err != nil {
		return err
	}
	n.formationID = id
	n.log.Info("joined formation", "formation", id)
	return nil
}

// joinFormation adopts id and tells the transport.
func (n *Node) joinFormation(id string) error {
	if err := n.adoptFormation(id); err != nil {
		return err
	}
	return n.tr.SetFormation(id)
}

// founders is the resolved founders list, sorted: GossipConfig.Founders, or
// this node alone in the development mode.
func (n *Node) founders() []string {
	f := slices.Clone(n.gcfg.Founders)
	if len(f) == 0 && n.gcfg.BootstrapExpect == 1 {
		f = []string{n.gossipName()}
	}
	slices.Sort(f)
	return f
}

// gossipName is this member's gossip name.
func (n *Node) gossipName() string {
	if n.gcfg.Name != "" {
		return n.gcfg.Name
	}
	return fmt.Sprintf("lockraft-%016x", n.id)
}

// formCluster runs steps 2 and 3 of the rule for the founders in plan, on
// the gossip goroutine. It returns nil once raft is bootstrapped, or why not
// (the caller tries again on a later round).
func (n *Node) formCluster(plan membership.FormationPlan) error {
	f := n.formation()
	if f == "" {
		id, err := newFormationID()
		if err != nil {
			return err
		}
		if err := n.joinFormation(id); err != nil {
			return err
		}
		f = id
	}
	req := formationRequest{formation: f, candidate: n.gossipName(), founders: n.founders()}
	for _, m := range plan.Founders {
		if m.Meta.RaftID == n.id {
			continue
		}
		req.target, req.targetID = m.Name, m.Meta.RaftID
		n.tr.AddPeer(m.Meta.RaftID, m.Meta.RaftAddr)
		ctx, cancel := context.WithTimeout(context.Background(), 2*n.cfg.electionTimeout())
		out, err := n.tr.Form(ctx, m.Meta.RaftID, req.proto())
		cancel()
		if errors.Is(err, transport.ErrFormationMismatch) {
			return fmt.Errorf("founder %s belongs to another formation (its data directory holds another cluster's id; "+
				"if this node's data directory was lost while forming, the founders that adopted the lost id must be "+
				"started with empty data directories too): %v", m.Name, err)
		}
		if err != nil {
			return fmt.Errorf("founder %s did not answer: %v", m.Name, err)
		}
		rep := formationReply{adopted: out.GetAdopted(), name: out.GetName(), id: out.GetId(), reason: out.GetReason()}
		if !rep.adopted {
			return fmt.Errorf("founder %s refused: %s", m.Name, rep.reason)
		}
		if rep.name != m.Name || rep.id != m.Meta.RaftID {
			return fmt.Errorf("founder %s: the node that answered is %s (raft id %016x), not raft id %016x", m.Name, rep.name, rep.id, m.Meta.RaftID)
		}
	}
	res := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := n.do(ctx, func() { res <- n.bootstrapRaft(plan.Founders) }); err != nil {
		return err
	}
	select {
	case err := <-res:
		return err
	case <-n.stopc:
		return lockerr.ErrClosed
	}
}

// Form serves a formation candidate's request (the typed call).
func (h *transportHandler) Form(ctx context.Context, from uint64, in *transportpb.FormRequest) (*transportpb.FormResponse, error) {
	n := (*Node)(h)
	req, err := formationRequestFrom(in)
	if err != nil {
		return nil, n.refuseCall(from, "Form", fmt.Errorf("%w: %v", transport.ErrInvalidRequest, err))
	}
	rep := n.handleFormation(from, req)
	return &transportpb.FormResponse{Adopted: rep.adopted, Name: rep.name, Id: rep.id, Reason: rep.reason}, nil
}

// handleFormation answers a candidate's request to adopt its formation id.
// It runs on the transport's goroutine; the answer "adopted" is sent only
// once the id is durable.
func (n *Node) handleFormation(from uint64, req formationRequest) formationReply {
	refuse := func(format string, a ...any) formationReply {
		reason := fmt.Sprintf(format, a...)
		n.log.Warn("formation: refused to adopt", "candidate", req.candidate, "from", from, "formation", req.formation, "reason", reason)
		return formationReply{name: n.gossipName(), id: n.id, reason: reason}
	}
	if n.ml == nil {
		return refuse("not a gossip member")
	}
	if req.target != n.gossipName() || req.targetID != n.id {
		return refuse("asked %s (raft id %016x), this is %s (raft id %016x)", req.target, req.targetID, n.gossipName(), n.id)
	}
	if mine := n.founders(); !slices.Equal(mine, req.founders) {
		return refuse("founders differ: candidate has [%s], this member has [%s]",
			strings.Join(req.founders, " "), strings.Join(mine, " "))
	}
	if !slices.Contains(req.founders, req.target) {
		return refuse("%s is not among the founders", req.target)
	}
	if req.candidate != req.founders[0] {
		return refuse("only the first founder, %s, forms the cluster; %s asked", req.founders[0], req.candidate)
	}
	if err := n.joinFormation(req.formation); err != nil {
		return refuse("%v", err)
	}
	return formationReply{adopted: true, name: n.gossipName(), id: n.id}
}
