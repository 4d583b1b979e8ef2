package fleet

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/transport"
	"github.com/lockraft/lockraft/transport/transportpb"
)

func TestValidFormationID(t *testing.T) {
	id, err := newFormationID()
	require.NoError(t, err)
	require.True(t, ValidFormationID(id))
	require.Len(t, id, 32)
	for _, bad := range []string{"", "abc", strings.Repeat("a", 65), strings.Repeat("A", 32), strings.Repeat("g", 16)} {
		require.False(t, ValidFormationID(bad), bad)
	}
}

// founderFleet is founder "f2" (raft id 1) of f1, f2, f3, as a gossip member.
func founderFleet(t *testing.T) (*Fleet, *fakeHost) {
	t.Helper()
	var members []membership.Member
	f, h := newTestFleet(t, &membership.Config{Name: "f2", Founders: []string{"f3", "f1", "f2"}}, nil, &members)
	f.ml = &membership.Membership{} // a gossip member (Answer only asks whether it is one)
	return f, h
}

// A founder adopts the first founder's formation id once, durably and only
// when the question is meant for it and the lists agree; each refusal says
// why.
func TestAnswer(t *testing.T) {
	f, h := founderFleet(t)
	idA, idB := strings.Repeat("a", 32), strings.Repeat("b", 32)
	founders := []string{"f1", "f2", "f3"}
	req := FormRequest{Formation: idA, Candidate: "f1", Founders: founders, Target: "f2", TargetID: 1}
	for want, r := range map[string]FormRequest{
		"founders differ":                     {Formation: idA, Candidate: "f1", Founders: founders[:2], Target: "f2", TargetID: 1},
		"asked f2 (raft id 0000000000000002)": {Formation: idA, Candidate: "f1", Founders: founders, Target: "f2", TargetID: 2},
		"only the first founder, f1":          {Formation: idA, Candidate: "f3", Founders: founders, Target: "f2", TargetID: 1},
		"malformed formation id":              {Formation: "xyz", Candidate: "f1", Founders: founders, Target: "f2", TargetID: 1},
	} {
		rep := f.Answer(9, r)
		require.False(t, rep.Adopted, want)
		require.Contains(t, rep.Reason, want)
		require.Equal(t, "f2", rep.Name)
	}
	require.Empty(t, f.Formation())
	require.Empty(t, h.persisted, "a refusal records nothing")

	rep := f.Answer(9, req)
	require.True(t, rep.Adopted)
	require.Equal(t, FormReply{Adopted: true, Name: "f2", ID: 1}, rep)
	require.Equal(t, []string{idA}, h.persisted, "durable before the answer")
	require.Equal(t, idA, h.net.formation, "and the transport carries it")
	require.True(t, f.Answer(9, req).Adopted, "asking again gets the same answer")
	req.Formation = idB
	rep = f.Answer(9, req)
	require.False(t, rep.Adopted)
	require.Contains(t, rep.Reason, "belongs to formation "+idA)

	static, _ := newTestFleet(t, nil, abc, nil)
	require.Contains(t, static.Answer(9, req).Reason, "not a gossip member")
}

func TestAdoptFormationRefusesRaftData(t *testing.T) {
	f, h := founderFleet(t)
	h.hasData = true
	require.ErrorContains(t, f.AdoptFormation(strings.Repeat("c", 32)), "raft data")
	require.Empty(t, f.Formation())
}

func TestServeFormBounds(t *testing.T) {
	f, _ := founderFleet(t)
	_, err := f.ServeForm(9, &transportpb.FormRequest{Founders: make([]string, maxFounders+1)})
	require.ErrorIs(t, err, transport.ErrInvalidRequest)
	_, err = f.ServeForm(9, &transportpb.FormRequest{Candidate: strings.Repeat("x", maxFormationText+1)})
	require.ErrorIs(t, err, transport.ErrInvalidRequest)
	out, err := f.ServeForm(9, &transportpb.FormRequest{Formation: strings.Repeat("a", 32), Candidate: "f1",
		Founders: []string{"f1", "f2", "f3"}, Target: "f2", TargetId: 1})
	require.NoError(t, err)
	require.True(t, out.GetAdopted())
}

// formNet answers the candidate's Form calls as the founders would.
type formNet struct {
	*fakeNet
	answer func(to uint64, req *transportpb.FormRequest) (*transportpb.FormResponse, error)
}

func (n *formNet) Form(_ context.Context, to uint64, req *transportpb.FormRequest) (*transportpb.FormResponse, error) {
	return n.answer(to, req)
}

// The candidate asks every other founder, and bootstraps raft with all of
// them only once each answered "adopted" as the node it meant.
func TestFormCluster(t *testing.T) {
	var members []membership.Member
	f, h := newTestFleet(t, &membership.Config{Name: "f1", Founders: []string{"f1", "f2", "f3"}}, nil, &members)
	net := &formNet{fakeNet: h.net}
	hn := &netHost{fakeHost: h, net: net}
	f.host = hn
	plan := membership.FormationPlan{Candidate: true, Ready: true, Founders: []membership.Member{
		{Name: "f1", Meta: membership.Meta{RaftID: 1, RaftAddr: "a1"}},
		{Name: "f2", Meta: membership.Meta{RaftID: 2, RaftAddr: "a2"}},
		{Name: "f3", Meta: membership.Meta{RaftID: 3, RaftAddr: "a3"}},
	}}
	var asked []uint64
	net.answer = func(to uint64, req *transportpb.FormRequest) (*transportpb.FormResponse, error) {
		asked = append(asked, to)
		require.Equal(t, "f1", req.GetCandidate())
		require.Equal(t, []string{"f1", "f2", "f3"}, req.GetFounders())
		if to == 3 {
			return &transportpb.FormResponse{Reason: "busy", Name: "f3", Id: 3}, nil
		}
		return &transportpb.FormResponse{Adopted: true, Name: req.GetTarget(), Id: req.GetTargetId()}, nil
	}
	err := f.formCluster(plan, nil)
	require.ErrorContains(t, err, "founder f3 refused: busy")
	require.Nil(t, h.peers, "not bootstrapped")
	id := f.Formation()
	require.True(t, ValidFormationID(id), "the candidate took an id first")

	net.answer = func(to uint64, req *transportpb.FormRequest) (*transportpb.FormResponse, error) {
		require.Equal(t, id, req.GetFormation(), "the same id again")
		if to == 3 {
			return &transportpb.FormResponse{Adopted: true, Name: "f3", Id: 33}, nil
		}
		return &transportpb.FormResponse{Adopted: true, Name: req.GetTarget(), Id: req.GetTargetId()}, nil
	}
	require.ErrorContains(t, f.formCluster(plan, nil), "the node that answered is f3 (raft id 0000000000000021)")

	net.answer = func(to uint64, req *transportpb.FormRequest) (*transportpb.FormResponse, error) {
		if to == 2 {
			return nil, transport.ErrFormationMismatch
		}
		return &transportpb.FormResponse{Adopted: true, Name: req.GetTarget(), Id: req.GetTargetId()}, nil
	}
	require.ErrorContains(t, f.formCluster(plan, nil), "founder f2 belongs to another formation")

	net.answer = func(_ uint64, req *transportpb.FormRequest) (*transportpb.FormResponse, error) {
		return &transportpb.FormResponse{Adopted: true, Name: req.GetTarget(), Id: req.GetTargetId()}, nil
	}
	require.NoError(t, f.formCluster(plan, nil))
	require.Len(t, h.peers, 3)
	require.True(t, f.members.Allows(2) && f.members.Allows(3), "the founders may send raft messages")
	require.Equal(t, "a3", h.net.peers[3])
	require.Equal(t, []uint64{2, 3}, asked, "every other founder was asked")

	h.hasData = true
	require.ErrorContains(t, f.formCluster(plan, nil), "raft already has state")
}

// netHost is a fakeHost with another network.
type netHost struct {
	*fakeHost
	net Network
}

func (h *netHost) Net() Network { return h.net }
