package node

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node/internal/lease"
)

// TestContactsPassTheGuard (L3, and security's message checks): a heartbeat
// naming the sessions of a confirmation round and a contact report of every
// open session, for a fleet of 2000 sessions, reach raft; the guard still
// refuses a large context on any other message. (Before the guard allowed
// heartbeat contexts above 64 bytes, a 5-member cluster's reports were
// refused and a new leader fell back to its checkpoints alone.)
func TestContactsPassTheGuard(t *testing.T) {
	now := time.Unix(1000, 0)
	sessions := make([]uint64, 2000)
	for i := range sessions {
		sessions[i] = uint64(1_000_000 + i*7)
	}
	// A follower that applied every session's OpenSession and saw them all
	// in a round of term 3 answers term 4's leader.
	follower := lease.New(lease.Config{Self: 1}, &tableHost{}, now.Add(-time.Minute))
	for i, s := range sessions {
		follower.OnEvent(&lockfsm.Event{Kind: lockfsm.EventSessionOpened, Session: s},
			now.Add(-time.Duration(i)*time.Millisecond))
	}
	follower.SeeRound(3, sessions, now.Add(-time.Second))
	// Term 4's leader, just ready, names them all in a round that asks for
	// reports.
	leader := lease.New(lease.Config{Self: 2}, &tableHost{}, now)
	leader.BecomeLeader(4, &raftpb.ConfState{Voters: []uint64{1, 2, 3}})
	leader.Ready(now)
	require.True(t, leader.ReportsWanted())
	hb := append(make([]byte, 8), leader.HeartbeatExt(slices.Clone(sessions))...)
	resp := &raftpb.Message{Type: raftpb.MessageType_MsgHeartbeatResp.Enum(), From: proto.Uint64(2), To: proto.Uint64(1),
		Term: proto.Uint64(4), Context: hb}
	follower.AnswerHeartbeat(resp, now)
	report := resp.GetContext()
	require.Greater(t, len(report), 2000*8, "a report names every session")
	v := raftView{id: 1, term: 4, lead: 2}
	for _, m := range []*raftpb.Message{
		{Type: raftpb.MessageType_MsgHeartbeat.Enum(), From: proto.Uint64(2), To: proto.Uint64(1), Term: proto.Uint64(4), Context: hb},
		resp,
	} {
		require.NoError(t, checkRemote(m, v), "%v with a %d-byte context", m.GetType(), len(m.GetContext()))
	}
	app := &raftpb.Message{Type: raftpb.MessageType_MsgApp.Enum(), From: proto.Uint64(2), To: proto.Uint64(1),
		Term: proto.Uint64(4), Context: report}
	require.Error(t, checkRemote(app, v), "a large context on a MsgApp")
	huge := &raftpb.Message{Type: raftpb.MessageType_MsgHeartbeat.Enum(), From: proto.Uint64(2), To: proto.Uint64(1),
		Term: proto.Uint64(4), Context: make([]byte, maxHeartbeatContext+1)}
	require.Error(t, checkRemote(huge, v), "a heartbeat context above maxHeartbeatContext")
}

// tableHost is an empty lock table with an open version gate.
type tableHost struct{}

func (*tableHost) Sessions() []lockfsm.SessionInfo { return nil }
func (*tableHost) Locks() []lockfsm.LockInfo       { return nil }
func (*tableHost) HasSession(uint64) bool          { return false }
func (*tableHost) OlderMemberKnown() bool          { return false }

// TestLeaseStatuses: the engine's answers reach the caller as the statuses
// the wire carries.
func TestLeaseStatuses(t *testing.T) {
	require.Equal(t, keepaliveOK, statusOf(lease.OK))
	require.Equal(t, keepaliveNotLeader, statusOf(lease.NotLeader))
	require.Equal(t, keepaliveNoSession, statusOf(lease.NoSession))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
