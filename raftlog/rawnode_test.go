package raftlog

import (
	"fmt"
	"io"
	"log"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// member is one raft node in a test cluster whose messages the test hands around.
type member struct {
	id      uint64
	path    string
	st      Log
	rn      *raft.RawNode
	applied []string // data of applied normal entries, in order
}

type cluster struct {
	t       *testing.T
	eng     engine
	members map[uint64]*member
	ids     []uint64
	inbox   []*raftpb.Message
}

var quietRaft = &raft.DefaultLogger{Logger: log.New(io.Discard, "", 0)}

func newCluster(t *testing.T, eng engine, n int) *cluster {
	c := &cluster{t: t, eng: eng, members: map[uint64]*member{}}
	dir := t.TempDir()
	for i := 1; i <= n; i++ {
		c.ids = append(c.ids, uint64(i))
	}
	for _, id := range c.ids {
		m := &member{id: id, path: filepath.Join(dir, fmt.Sprintf("%s-%d", eng.file, id))}
		st, err := eng.open(m.path, Options{NoSync: true, SegmentSize: 4096})
		require.NoError(t, err)
		require.False(t, st.HasState())
		require.NoError(t, st.Bootstrap(&raftpb.ConfState{Voters: c.ids}))
		m.st = st
		c.members[id] = m
		c.start(m)
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			_ = m.st.Close()
		}
	})
	return c
}

func (c *cluster) start(m *member) {
	rn, err := raft.NewRawNode(&raft.Config{
		ID: m.id, ElectionTick: 10, HeartbeatTick: 1, Storage: m.st,
		MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256, CheckQuorum: true, PreVote: true,
		Logger: quietRaft,
	})
	require.NoError(c.t, err)
	m.rn, m.applied = rn, nil
}

// restart closes every storage (as a crash would leave them) and restarts from disk.
func (c *cluster) restart() {
	c.inbox = nil
	for _, m := range c.members {
		require.NoError(c.t, m.st.Close())
		st, err := c.eng.open(m.path, Options{NoSync: true, SegmentSize: 4096})
		require.NoError(c.t, err)
		require.True(c.t, st.HasState())
		require.ErrorIs(c.t, st.Bootstrap(&raftpb.ConfState{Voters: c.ids}), errNotEmpty)
		m.st = st
		c.start(m)
	}
}

// handleReady follows the Ready order: Save, send, apply, Advance.
func (c *cluster) handleReady(m *member) {
	rd := m.rn.Ready()
	require.NoError(c.t, m.st.Save(rd.Snapshot, rd.HardState, rd.Entries))
	c.inbox = append(c.inbox, rd.Messages...)
	for _, e := range rd.CommittedEntries {
		switch e.GetType() {
		case raftpb.EntryNormal:
			if len(e.GetData()) > 0 {
				m.applied = append(m.applied, string(e.GetData()))
			}
		case raftpb.EntryConfChange:
			var cc raftpb.ConfChange
			require.NoError(c.t, proto.Unmarshal(e.GetData(), &cc))
			require.NoError(c.t, m.st.SetConfState(m.rn.ApplyConfChange(&cc), e.GetIndex()))
		}
	}
	m.rn.Advance(rd)
}

// settle runs Readies and delivers messages until the cluster is quiet.
func (c *cluster) settle() {
	for range 10000 {
		busy := false
		for _, id := range c.ids {
			if m := c.members[id]; m.rn.HasReady() {
				c.handleReady(m)
				busy = true
			}
		}
		msgs := c.inbox
		c.inbox = nil
		for _, msg := range msgs {
			busy = true
			_ = c.members[msg.GetTo()].rn.Step(msg)
		}
		if !busy {
			return
		}
	}
	c.t.Fatal("cluster did not settle")
}

// elect ticks every member until one is leader and returns it.
func (c *cluster) elect() *member {
	for range 200 {
		for _, id := range c.ids {
			c.members[id].rn.Tick()
		}
		c.settle()
		for _, id := range c.ids {
			if m := c.members[id]; m.rn.Status().RaftState == raft.StateLeader {
				return m
			}
		}
	}
	c.t.Fatal("no leader elected")
	return nil
}

func (c *cluster) propose(leader *member, data []string) {
	for _, d := range data {
		require.NoError(c.t, leader.rn.Propose([]byte(d)))
	}
	c.settle()
}

func TestRawNodeOverStorage(t *testing.T) {
	for _, eng := range engines {
		for _, n := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/%d nodes", eng.name, n), func(t *testing.T) {
				testRawNode(t, eng, n)
			})
		}
	}
}

func testRawNode(t *testing.T, eng engine, n int) {
	c := newCluster(t, eng, n)
	leader := c.elect()
	var want []string
	for i := range 50 {
		want = append(want, fmt.Sprintf("cmd-%d", i))
	}
	c.propose(leader, want)
	for _, m := range c.members {
		require.Equal(t, want, m.applied, "member %d", m.id)
	}
	term := leader.rn.Status().GetTerm()

	c.restart()
	leader = c.elect()
	require.Greater(t, leader.rn.Status().GetTerm(), term)
	for _, m := range c.members {
		// Committed entries are replayed from disk on restart.
		require.Equal(t, want, m.applied, "member %d after restart", m.id)
		first, _ := m.st.FirstIndex()
		last, _ := m.st.LastIndex()
		ents, err := m.st.Entries(first, last+1, 1<<30)
		require.NoError(t, err)
		var got []string
		for _, e := range ents {
			if len(e.GetData()) > 0 {
				got = append(got, string(e.GetData()))
			}
		}
		require.Equal(t, want, got)
	}
	more := []string{"after-restart"}
	c.propose(leader, more)
	for _, m := range c.members {
		require.Equal(t, slices.Concat(want, more), m.applied)
	}
}
