package fleet

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/transport"
)

func TestMemberSet(t *testing.T) {
	s := NewMemberSet([]uint64{1, 2})
	require.True(t, s.Allows(1))
	require.False(t, s.Allows(7), "a stranger")
	s.SetConf(&raftpb.ConfState{Voters: []uint64{3}, LearnersNext: []uint64{4}})
	require.True(t, s.Allows(3))
	require.True(t, s.Allows(4))
	s.SetGossip([]uint64{5, 7})
	require.False(t, s.Allows(5), "gossip's word alone, no certificate role known")
	s.SetRoles(func(id uint64) (transport.Role, bool) {
		if id == 5 {
			return transport.RoleVoter, true
		}
		return transport.RoleLight, true
	})
	require.True(t, s.Allows(5), "gossip reports raft data, and the certificate has the voter role")
	require.False(t, s.Allows(7), "gossip reports raft data, but the certificate is a light member's")
	s.AddFounders([]uint64{6})
	require.True(t, s.Allows(6))
	s.Remove(5)
	s.Remove(1)
	require.False(t, s.Allows(5), "removed: whatever gossip says")
	require.False(t, s.Allows(1))
	s.SetConf(&raftpb.ConfState{Voters: []uint64{1}})
	require.False(t, s.Allows(1), "removed for good")
}
