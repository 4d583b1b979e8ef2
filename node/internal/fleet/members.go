package fleet

import (
	"slices"
	"sync"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/transport"
)

// MemberSet says who may send this node raft messages (and snapshots):
//
//   - every id of the configuration this node applied (voters, learners,
//     outgoing voters, learners to be);
//   - the founding members of a static cluster and the voters this node
//     bootstrapped with by gossip (before their configuration is applied);
//   - with gossip, every member that gossip reports with raft data and
//     whose certificate has the voter role (SetRoles; the gossip flag is
//     the member's own word, the certificate the CA's): a follower that
//     lags behind the configuration change adding a new voter must still
//     hear that voter once it leads, and a new learner must hear the leader
//     before any configuration reached it;
//
// and never a member whose removal this node applied (as etcd's transport
// refuses removed members), whatever gossip says. A light member (gossip, no
// raft data) or a stranger holding a certificate of the cluster's CA is not
// in it: its raft messages are dropped.
//
// Written by the loop (configuration) and the gossip goroutine, read by the
// transport's goroutines: a mutex, not loop ownership.
type MemberSet struct {
	mu      sync.RWMutex
	conf    map[uint64]bool
	static  map[uint64]bool
	gossip  map[uint64]bool
	removed map[uint64]bool
	role    func(uint64) (transport.Role, bool) // SetRoles; nil: no gossip member is admitted
}

// NewMemberSet makes the set of a node whose static members are static.
func NewMemberSet(static []uint64) *MemberSet {
	s := &MemberSet{conf: map[uint64]bool{}, static: map[uint64]bool{}, gossip: map[uint64]bool{},
		removed: map[uint64]bool{}}
	for _, id := range static {
		s.static[id] = true
	}
	return s
}

// Allows reports whether id may send raft messages.
func (s *MemberSet) Allows(id uint64) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.removed[id] {
		return false
	}
	if s.conf[id] || s.static[id] {
		return true
	}
	if !s.gossip[id] || s.role == nil {
		return false
	}
	r, ok := s.role(id)
	return ok && r.Voter()
}

// SetRoles gives the set the roles of members' certificates
// (transport.Network's PeerRole): a member gossip reports is admitted only
// with the voter role.
func (s *MemberSet) SetRoles(role func(uint64) (transport.Role, bool)) {
	s.mu.Lock()
	s.role = role
	s.mu.Unlock()
}

// SetConf records the applied configuration (loop).
func (s *MemberSet) SetConf(cs *raftpb.ConfState) {
	conf := map[uint64]bool{}
	for _, set := range [][]uint64{cs.GetVoters(), cs.GetLearners(), cs.GetVotersOutgoing(), cs.GetLearnersNext()} {
		for _, id := range set {
			conf[id] = true
		}
	}
	s.mu.Lock()
	s.conf = conf
	s.mu.Unlock()
}

// AddFounders admits the voters this node bootstraps with (loop).
func (s *MemberSet) AddFounders(ids []uint64) {
	s.mu.Lock()
	for _, id := range ids {
		s.static[id] = true
	}
	s.mu.Unlock()
}

// SetGossip records the members gossip reports with raft data (gossip
// goroutine).
func (s *MemberSet) SetGossip(ids []uint64) {
	g := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		g[id] = true
	}
	s.mu.Lock()
	s.gossip = g
	s.mu.Unlock()
}

// Removed reports whether this node applied id's removal (since its last
// snapshot: an earlier one is kept out by the configuration alone). Safe
// from any goroutine.
func (s *MemberSet) Removed(id uint64) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.removed[id]
}

// Remove bars id for good: its removal was applied (loop).
func (s *MemberSet) Remove(id uint64) {
	s.mu.Lock()
	s.removed[id] = true
	delete(s.static, id)
	s.mu.Unlock()
}

// IsMember reports whether id is a member of this node's cluster: one the
// member set lets send raft messages (the configuration, the static list, a
// voter gossip reports), or one gossip reports alive (a light member). Safe
// from any goroutine.
func (f *Fleet) IsMember(id uint64) bool {
	if f.members.Allows(id) {
		return true
	}
	return f.ml != nil && slices.ContainsFunc(f.ml.Members(), func(m membership.Member) bool {
		return m.Meta.RaftID == id && m.State == membership.StateAlive
	})
}
