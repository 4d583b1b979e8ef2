package inspect

import (
	"maps"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/membership"
)

var t0 = time.Unix(1000, 0)

// dates dates index i at t0+i s; the leader knows session 7 and the lease
// filed under "a" with token 5.
type dates struct{}

func (dates) AppliedAt(i uint64) time.Time { return t0.Add(time.Duration(i) * time.Second) }
func (dates) LeaseDeadline(filed string, token, _ uint64, _ string) (time.Time, bool) {
	return t0.Add(time.Hour), filed == "a" && token == 5
}
func (dates) SessionDeadline(s uint64) (time.Time, bool) { return t0.Add(time.Minute), s == 7 }

func TestLockView(t *testing.T) {
	li := lockfsm.LockInfo{Name: "b", Primitive: lockfsm.PrimRW,
		Holds: []lockfsm.HoldInfo{
			{Owner: "x", Session: 7, Token: 3, Mode: lockfsm.ModeShared, HoldCount: 1},
			{Owner: "y", Session: 8, Token: 5, Mode: lockfsm.ModeShared, HoldCount: 2, LeaseMillis: 10, Names: []string{"a", "b"}},
		},
		Waiters: []lockfsm.WaiterInfo{{Owner: "z", Session: 9, Enqueued: 6, Mode: lockfsm.ModeExclusive}},
	}
	v := Lock(li, SessionNodes([]lockfsm.SessionInfo{{Session: 7, Node: 1}, {Session: 8, Node: 2}, {Session: 9, Node: 3}}), dates{})
	if v.Holder == nil || v.Holder.Owner != "x" || v.Holder.Member != 1 || v.Holder.Mode != "read" {
		t.Fatalf("holder: %+v", v.Holder)
	}
	if h := v.Holds[0]; !h.GrantedAt.Equal(t0.Add(3*time.Second)) || !h.ExpiresAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("a session hold is dated by its grant and expires with its session: %+v", h)
	}
	if h := v.Holds[1]; !h.ExpiresAt.Equal(t0.Add(time.Hour)) || h.Member != 2 {
		t.Errorf("a leased multi-name hold expires with the lease filed under its first name: %+v", h)
	}
	if len(v.Waiters) != 1 || v.Waiters[0].Position != 1 || v.Waiters[0].Mode != "write" || v.Waiters[0].Member != 3 ||
		!v.Waiters[0].EnqueuedAt.Equal(t0.Add(6*time.Second)) {
		t.Errorf("waiters: %+v", v.Waiters)
	}
	if m := Lock(lockfsm.LockInfo{Name: "m", Primitive: lockfsm.PrimMutex,
		Holds: []lockfsm.HoldInfo{{Owner: "x", Session: 1, Token: 1}}}, nil, dates{}); m.Holds[0].Mode != "" {
		t.Errorf("a mutex has no mode: %q", m.Holds[0].Mode)
	}
}

func TestMembersView(t *testing.T) {
	st := raft.Status{Progress: map[uint64]tracker.Progress{
		1: {Match: 10}, 2: {Match: 7, RecentActive: true}, 3: {Match: 4},
	}}
	st.HardState = &raftpb.HardState{Term: new(uint64(4)), Commit: new(uint64(9))}
	v := Members(&Node{ID: 1, Addr: "a1", Leader: 1, Leading: true, Status: st,
		Conf:   &raftpb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{3}},
		Static: map[uint64]string{2: "a2", 9: "gone"},
		Gossip: []membership.Member{{Name: "l", State: membership.StateAlive, Meta: membership.Meta{RaftID: 5, RaftAddr: "a5"}}},
		Active: func(id uint64) bool { return id == 1 || id == 3 }, // the leader itself, and 3 heard lately
	})
	if v.Leader != 1 || !v.FromLeader || v.Term != 4 || v.Commit != 9 || v.LastIndex != 10 || len(v.Members) != 4 {
		t.Fatalf("view: %+v", v)
	}
	want := []views.MemberView{
		{ID: 1, Role: views.RoleVoter, RaftAddr: "a1", Leader: true, Healthy: true, Match: 10, LagKnown: true},
		{ID: 2, Role: views.RoleVoter, RaftAddr: "a2", Healthy: true, Match: 7, Lag: 3, LagKnown: true},
		{ID: 3, Role: views.RoleLearner, Healthy: true, Match: 4, Lag: 6, LagKnown: true},
		{ID: 5, Role: views.RoleLight, RaftAddr: "a5", GossipName: "l", Gossip: "alive", Healthy: true},
	}
	for i, m := range v.Members {
		if m != want[i] {
			t.Errorf("member %d:\n got %+v\nwant %+v", i, m, want[i])
		}
	}
	role, roles := Roles(&raftpb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{3}},
		[]membership.Member{{State: membership.StateAlive, Meta: membership.Meta{RaftID: 5}},
			{State: membership.StateAlive, Meta: membership.Meta{RaftID: 2}},
			{State: membership.StateAlive, Meta: membership.Meta{RaftID: 7}}}, 3, false,
		func(id uint64) bool { return id == 7 })
	if role != views.RoleLearner || roles[views.RoleVoter] != 2 || roles[views.RoleLearner] != 1 || roles[views.RoleLight] != 1 {
		t.Errorf("roles: %q %v (7 was removed: not light)", role, roles)
	}
}

// A member removed from the configuration that gossip still reports alive
// is "removed", never healthy, not a light member: on any node that applied
// the removal, and on the leader for any member outside the configuration
// with raft data (which a light member never has). A light member stays
// light.
func TestMembersViewRemoved(t *testing.T) {
	st := raft.Status{Progress: map[uint64]tracker.Progress{1: {Match: 10}, 2: {Match: 10}}}
	gossip := []membership.Member{
		{Name: "g2", State: membership.StateAlive, Meta: membership.Meta{RaftID: 2, HasData: true}},
		{Name: "g3", State: membership.StateAlive, Meta: membership.Meta{RaftID: 3, HasData: true}},
		{Name: "g4", State: membership.StateAlive, Meta: membership.Meta{RaftID: 4, HasData: true}},
		{Name: "g5", State: membership.StateAlive, Meta: membership.Meta{RaftID: 5}},
	}
	conf := &raftpb.ConfState{Voters: []uint64{1, 2}}
	roles := func(v views.MembersView) map[uint64]string {
		m := map[uint64]string{}
		for _, mv := range v.Members {
			m[uint64(mv.ID)] = mv.Role
			if mv.Role == views.RoleRemoved && mv.Healthy {
				t.Errorf("removed member %v healthy", mv.ID)
			}
		}
		return m
	}
	applied := func(id uint64) bool { return id == 3 }
	lead := Members(&Node{ID: 1, Leader: 1, Leading: true, Status: st, Conf: conf, Gossip: gossip,
		Active: func(uint64) bool { return true }, Removed: applied})
	want := map[uint64]string{1: views.RoleVoter, 2: views.RoleVoter, 3: views.RoleRemoved, 4: views.RoleRemoved,
		5: views.RoleLight}
	if got := roles(lead); !maps.Equal(got, want) {
		t.Errorf("leader's view: %v, want %v", got, want)
	}
	// A follower knows only the removals it applied: 4's data may be that
	// of a learner whose addition it has not applied yet.
	fol := Members(&Node{ID: 2, Leader: 1, Status: raft.Status{}, Conf: conf, Gossip: gossip, Removed: applied})
	want[4] = views.RoleLight
	if got := roles(fol); !maps.Equal(got, want) {
		t.Errorf("follower's view: %v, want %v", got, want)
	}
}
