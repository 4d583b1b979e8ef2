package fleet

// Forming a cluster by gossip: never two.
//
// A count of visible members cannot decide who forms a cluster: a fleet that
// starts as two islands (a partition, seeds that form islands) of three sees
// three members on each side, and each island would bootstrap its own cluster
// with the same ClusterID, granting the same names; when the islands met,
// each leader would tell the other's members they were removed. The rule
// here needs a fixed denominator instead: the operator names the founders
// (membership.Config.Founders, gossip names, the same list on every member; on
// Kubernetes the first pods of the StatefulSet), and a cluster is formed only
// with every one of them.
//
// The rule.
//
//  1. Formation ids. A formed cluster has an identity: a random formation id
//     made when it is formed. A node holds at most one, written to its
//     identity file (Host.PersistFormation, durably) before it is
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

	"go.etcd.io/raft/v3"

	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// FormRequest is the candidate's question to one founder (the typed Form
// call carries it).
type FormRequest struct {
	Formation string
	Candidate string   // the candidate's gossip name
	Founders  []string // the candidate's founders list, sorted
	Target    string   // the founder asked: gossip name
	TargetID  uint64   // and raft id, as the candidate's gossip view says
}

func (r *FormRequest) proto() *transportpb.FormRequest {
	return &transportpb.FormRequest{Formation: r.Formation, Candidate: r.Candidate, Founders: r.Founders,
		Target: r.Target, TargetId: r.TargetID}
}

// Bounds on what a founder accepts to read from a candidate.
const (
	maxFounders      = 64
	maxFormationText = 1024
)

func formRequestFrom(p *transportpb.FormRequest) (FormRequest, error) {
	r := FormRequest{Formation: p.GetFormation(), Candidate: p.GetCandidate(), Founders: p.GetFounders(),
		Target: p.GetTarget(), TargetID: p.GetTargetId()}
	if len(r.Founders) > maxFounders {
		return r, fmt.Errorf("formation request: %d founders", len(r.Founders))
	}
	for _, s := range append([]string{r.Formation, r.Candidate, r.Target}, r.Founders...) {
		if len(s) > maxFormationText {
			return r, errors.New("formation request: a name or id is too long")
		}
	}
	return r, nil
}

// FormReply is a founder's answer.
type FormReply struct {
	Adopted bool
	Name    string // the answering node's gossip name
	ID      uint64 // and raft id
	Reason  string // why it refused
}

// newFormationID makes a random formation id: 32 hex digits.
func newFormationID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// ValidFormationID accepts what newFormationID makes and little else: 16
// to 64 characters of [0-9a-f]. An id comes from a peer's header before it
// is written to the identity file, so nothing else may pass.
func ValidFormationID(s string) bool {
	if len(s) < 16 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Formation returns this node's formation id ("" if none yet).
func (f *Fleet) Formation() string {
	f.formMu.Lock()
	defer f.formMu.Unlock()
	return f.formation
}

// AdoptFormation makes id this node's formation id for good: it is
// recorded (Host.PersistFormation, durably) before anything uses it. It
// refuses when the node already has another id, or raft data (which could
// only be of a cluster without formation ids). The transport calls it (its
// AdoptFormation) when a formed cluster adds this node, and then records
// the id itself; the Fleet's own callers use joinFormation.
func (f *Fleet) AdoptFormation(id string) error {
	f.formMu.Lock()
	defer f.formMu.Unlock()
	switch {
	case f.formation == id:
		return nil
	case f.formation != "":
		return fmt.Errorf("this node belongs to formation %s", f.formation)
	case !ValidFormationID(id):
		return fmt.Errorf("malformed formation id %q", id)
	case f.host.HasData():
		return errors.New("this node has raft data of a cluster without a formation id")
	}
	if err := f.host.PersistFormation(id); err != nil {
		return err
	}
	f.formation = id
	f.log.Info("joined formation", "formation", id)
	return nil
}

// joinFormation adopts id and tells the transport.
func (f *Fleet) joinFormation(id string) error {
	if err := f.AdoptFormation(id); err != nil {
		return err
	}
	return f.host.Net().SetFormation(id)
}

// formCluster runs steps 2 and 3 of the rule for the founders in plan, on
// the gossip goroutine. It returns nil once raft is bootstrapped, or why not
// (the caller tries again on a later round).
func (f *Fleet) formCluster(plan membership.FormationPlan, stop <-chan struct{}) error {
	id := f.Formation()
	if id == "" {
		fresh, err := newFormationID()
		if err != nil {
			return err
		}
		if err := f.joinFormation(fresh); err != nil {
			return err
		}
		id = fresh
	}
	net := f.host.Net()
	req := FormRequest{Formation: id, Candidate: f.name, Founders: f.founders}
	for _, m := range plan.Founders {
		if m.Meta.RaftID == f.cfg.ID {
			continue
		}
		req.Target, req.TargetID = m.Name, m.Meta.RaftID
		net.AddPeer(m.Meta.RaftID, m.Meta.RaftAddr)
		ctx, cancel := context.WithTimeout(context.Background(), 2*f.cfg.ElectionTimeout)
		out, err := net.Form(ctx, m.Meta.RaftID, req.proto())
		cancel()
		if errors.Is(err, transport.ErrFormationMismatch) {
			return fmt.Errorf("founder %s belongs to another formation (its data directory holds another cluster's id; "+
				"if this node's data directory was lost while forming, the founders that adopted the lost id must be "+
				"started with empty data directories too): %v", m.Name, err)
		}
		if err != nil {
			return fmt.Errorf("founder %s did not answer: %v", m.Name, err)
		}
		rep := FormReply{Adopted: out.GetAdopted(), Name: out.GetName(), ID: out.GetId(), Reason: out.GetReason()}
		if !rep.Adopted {
			return fmt.Errorf("founder %s refused: %s", m.Name, rep.Reason)
		}
		if rep.Name != m.Name || rep.ID != m.Meta.RaftID {
			return fmt.Errorf("founder %s: the node that answered is %s (raft id %016x), not raft id %016x", m.Name, rep.Name, rep.ID, m.Meta.RaftID)
		}
	}
	res := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := f.host.Do(ctx, func() { res <- f.bootstrap(plan.Founders) }); err != nil {
		return err
	}
	select {
	case err := <-res:
		return err
	case <-stop:
		return errClosed
	}
}

// errClosed: the node closed while forming (for the log).
var errClosed = errors.New("lockraft: node closed")

// bootstrap forms the cluster with voters (loop); it refuses if raft
// already has state (this node was contacted by a leader meanwhile).
func (f *Fleet) bootstrap(voters []membership.Member) error {
	if f.host.HasData() || f.host.Status().GetTerm() > 0 {
		return errors.New("raft already has state")
	}
	peers := make([]raft.Peer, 0, len(voters))
	ids := make([]uint64, 0, len(voters))
	for _, v := range voters {
		peers = append(peers, raft.Peer{ID: v.Meta.RaftID, Context: []byte(v.Meta.RaftAddr)})
		ids = append(ids, v.Meta.RaftID)
		if v.Meta.RaftID != f.cfg.ID {
			f.host.Net().AddPeer(v.Meta.RaftID, v.Meta.RaftAddr)
		}
	}
	f.members.AddFounders(ids)
	if err := f.host.Bootstrap(peers); err != nil {
		return err
	}
	f.log.Info("bootstrapped new cluster from gossip", "voters", views.MemberIDs(ids), "cluster", f.cfg.ClusterID, "formation", f.Formation())
	return nil
}

// ServeForm serves a formation candidate's request (the typed Form call).
// The error, for a malformed request, wraps transport.ErrInvalidRequest.
func (f *Fleet) ServeForm(from uint64, in *transportpb.FormRequest) (*transportpb.FormResponse, error) {
	req, err := formRequestFrom(in)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", transport.ErrInvalidRequest, err)
	}
	rep := f.Answer(from, req)
	return &transportpb.FormResponse{Adopted: rep.Adopted, Name: rep.Name, Id: rep.ID, Reason: rep.Reason}, nil
}

// Answer answers a candidate's request to adopt its formation id. It runs
// on the transport's goroutine; the answer "adopted" is sent only once the
// id is durable.
func (f *Fleet) Answer(from uint64, req FormRequest) FormReply {
	refuse := func(format string, a ...any) FormReply {
		reason := fmt.Sprintf(format, a...)
		f.log.Warn("formation: refused to adopt", "candidate", req.Candidate, "from", views.MemberID(from), "formation", req.Formation, "reason", reason)
		return FormReply{Name: f.name, ID: f.cfg.ID, Reason: reason}
	}
	if f.ml == nil {
		return refuse("not a gossip member")
	}
	if req.Target != f.name || req.TargetID != f.cfg.ID {
		return refuse("asked %s (raft id %016x), this is %s (raft id %016x)", req.Target, req.TargetID, f.name, f.cfg.ID)
	}
	if mine := f.founders; !slices.Equal(mine, req.Founders) {
		return refuse("founders differ: candidate has [%s], this member has [%s]",
			strings.Join(req.Founders, " "), strings.Join(mine, " "))
	}
	if !slices.Contains(req.Founders, req.Target) {
		return refuse("%s is not among the founders", req.Target)
	}
	if req.Candidate != req.Founders[0] {
		return refuse("only the first founder, %s, forms the cluster; %s asked", req.Founders[0], req.Candidate)
	}
	if f.cfg.Authenticated {
		// The candidate is the caller: the gossip member of that name
		// has the raft id the caller's certificate names.
		if id, ok := f.gossipID(req.Candidate); !ok || id != from {
			return refuse("the caller %016x is not the candidate %s (raft id %016x, seen %t)", from, req.Candidate, id, ok)
		}
	}
	if err := f.joinFormation(req.Formation); err != nil {
		return refuse("%v", err)
	}
	return FormReply{Adopted: true, Name: f.name, ID: f.cfg.ID}
}

// gossipID is the raft id of the gossip member called name, if gossip
// lists one.
func (f *Fleet) gossipID(name string) (uint64, bool) {
	for _, m := range f.ml.Members() {
		if m.Name == name {
			return m.Meta.RaftID, true
		}
	}
	return 0, false
}
