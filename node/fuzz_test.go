package node

import (
	"encoding/binary"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// Fuzz targets for what the node decodes and judges from the network; their
// seed corpora are in testdata/fuzz/<Target> (transport's package doc says
// how to run them longer).

// raftHarness is a raft node (id 1 of voters 1, 2, 3) on raft's
// MemoryStorage, driven as the node's loop drives raft: AsyncStorageWrites,
// each Ready handled at once (appends stored, responses stepped back), the
// guard's last index taken from each storage append. It is a harness for
// FuzzRaftMessageGuard only; the node itself runs on raftlog.
type raftHarness struct {
	rn *raft.RawNode
	st *raft.MemoryStorage
	g  msgGuard
}

func newRaftHarness(t testing.TB, leader bool) *raftHarness {
	st := raft.NewMemoryStorage()
	require.NoError(t, st.ApplySnapshot(&raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(2)),
		Term: new(uint64(1)), ConfState: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}}}))
	var ents []*raftpb.Entry
	for i, term := range []uint64{1, 1, 2, 2, 2, 3, 3, 3} {
		ents = append(ents, &raftpb.Entry{Index: new(uint64(i + 3)), Term: new(term), Type: raftpb.EntryNormal.Enum(),
			Data: []byte{byte(i)}})
	}
	require.NoError(t, st.Append(ents))
	require.NoError(t, st.SetHardState(&raftpb.HardState{Term: new(uint64(3)), Commit: new(uint64(6)), Vote: new(uint64(0))}))
	rn, err := raft.NewRawNode(&raft.Config{ID: 1, ElectionTick: 10, HeartbeatTick: 1, Storage: st,
		MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256, MaxUncommittedEntriesSize: 64 << 20, CheckQuorum: true,
		PreVote: true, StepDownOnRemoval: true, AsyncStorageWrites: true, Logger: discardLogger()})
	require.NoError(t, err)
	h := &raftHarness{rn: rn, st: st}
	h.g.lastIndex = 10
	h.drain()
	if leader {
		require.NoError(t, rn.Campaign())
		h.drain()
		term := rn.BasicStatus().GetTerm() + 1
		h.stepLocal(&raftpb.Message{Type: raftpb.MessageType_MsgPreVoteResp.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(term)})
		h.stepLocal(&raftpb.Message{Type: raftpb.MessageType_MsgVoteResp.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(term)})
		require.Equal(t, raft.StateLeader, rn.BasicStatus().RaftState)
	}
	return h
}

func discardLogger() raft.Logger { return raftLogger{l: slog.New(slog.DiscardHandler)} }

func (h *raftHarness) stepLocal(m *raftpb.Message) {
	_ = h.rn.Step(m)
	h.drain()
}

// drain handles Readys as handleReady does (storage writes done at once).
func (h *raftHarness) drain() {
	for h.rn.HasReady() {
		rd := h.rn.Ready()
		h.g.appStepped = false
		for _, m := range rd.Messages {
			switch m.GetTo() {
			case raft.LocalAppendThread:
				h.g.noteAppend(m)
				if s := m.GetSnapshot(); s != nil && !raft.IsEmptySnap(s) {
					_ = h.st.ApplySnapshot(s)
				}
				_ = h.st.Append(m.GetEntries())
				if m.Term != nil || m.Vote != nil || m.Commit != nil {
					_ = h.st.SetHardState(&raftpb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit})
				}
				for _, r := range m.GetResponses() {
					_ = h.rn.Step(r)
				}
			case raft.LocalApplyThread:
				for _, r := range m.GetResponses() {
					_ = h.rn.Step(r)
				}
			}
		}
	}
}

func (h *raftHarness) view() raftView {
	st := h.rn.BasicStatus()
	return raftView{id: 1, term: st.GetTerm(), lead: st.Lead, isLeader: st.RaftState == raft.StateLeader,
		lastIndex: h.g.lastIndex}
}

// deliver is what a remote message goes through on its way to raft: the
// transport's filter (a peer of this cluster, authenticated as from), the
// guard (heartbeats after an append wait for the Ready), and the node's
// step (a proposal is proposed by the leader itself, a hint never reaches
// raft).
func (h *raftHarness) deliver(m *raftpb.Message, from uint64) {
	m.From, m.To = new(from), new(uint64(1))
	if checkEnums(m) != nil || raft.IsLocalMsg(m.GetType()) || len(m.GetResponses()) > 0 {
		return // the transport refuses or drops these
	}
	if m.GetType() == raftpb.MessageType_MsgHeartbeat && h.g.appStepped {
		h.drain()
	}
	if checkRemote(m, h.view()) != nil {
		return
	}
	switch {
	case isCommitHint(m):
		return
	case m.GetType() == raftpb.MessageType_MsgProp:
		_ = h.rn.Step(&raftpb.Message{Type: raftpb.MessageType_MsgProp.Enum(), From: new(uint64(1)), Entries: m.GetEntries()})
	default:
		if m.GetType() == raftpb.MessageType_MsgApp || m.GetType() == raftpb.MessageType_MsgSnap {
			h.g.appStepped = true
		}
		_ = h.rn.Step(m)
	}
}

// FuzzRaftMessageGuard: any sequence of messages from the two peers that the
// guard lets through never makes raft panic (the review's heartbeat, local
// message and proposal crashes, and whatever else raft would trust). Input:
// a flag byte (bit 0: this node leads), then per message a selector byte
// (bit 0: from 2 or 3; bit 1: tick first) and a uvarint-length marshalled
// raftpb.Message.
func FuzzRaftMessageGuard(f *testing.F) {
	add := func(leader bool, msgs ...*raftpb.Message) {
		b := []byte{0}
		if leader {
			b[0] = 1
		}
		for _, m := range msgs {
			raw, err := proto.Marshal(m)
			require.NoError(f, err)
			b = append(b, 0)
			b = binary.AppendUvarint(b, uint64(len(raw)))
			b = append(b, raw...)
		}
		f.Add(b)
	}
	ent := func(i, t uint64) *raftpb.Entry {
		return &raftpb.Entry{Index: new(i), Term: new(t), Type: raftpb.EntryNormal.Enum(), Data: []byte("x")}
	}
	add(false, &raftpb.Message{Type: raftpb.MessageType_MsgHeartbeat.Enum(), Term: new(uint64(1003)), Commit: new(uint64(1 << 40))})
	add(false, &raftpb.Message{Type: raftpb.MessageType_MsgApp.Enum(), Term: new(uint64(4)), Index: new(uint64(10)),
		LogTerm: new(uint64(3)), Commit: new(uint64(11)), Entries: []*raftpb.Entry{ent(11, 4), ent(12, 4)}},
		&raftpb.Message{Type: raftpb.MessageType_MsgHeartbeat.Enum(), Term: new(uint64(4)), Commit: new(uint64(12))})
	add(false, &raftpb.Message{Type: raftpb.MessageType_MsgApp.Enum(), Term: new(uint64(4)), Index: new(uint64(7)),
		LogTerm: new(uint64(2)), Entries: []*raftpb.Entry{ent(100, 4)}})
	add(true, &raftpb.Message{Type: raftpb.MessageType_MsgProp.Enum(), Entries: []*raftpb.Entry{
		{Type: raftpb.EntryType_EntryConfChange.Enum(), Data: []byte{0xff, 0xff}}}})
	add(true, &raftpb.Message{Type: raftpb.MessageType_MsgReadIndex.Enum()})
	add(true, &raftpb.Message{Type: raftpb.MessageType_MsgAppResp.Enum(), Term: new(uint64(5)), Index: new(uint64(1 << 40))})
	add(false, &raftpb.Message{Type: raftpb.MessageType_MsgSnap.Enum(), Term: new(uint64(3)), Snapshot: &raftpb.Snapshot{
		Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(50)), Term: new(uint64(3)),
			ConfState: &raftpb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{2}}}}})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		h := newRaftHarness(t, b[0]&1 == 1)
		b = b[1:]
		for n := 0; len(b) > 1 && n < 32; n++ {
			sel := b[0]
			l, k := binary.Uvarint(b[1:])
			if k <= 0 || l > uint64(len(b)-1-k) {
				return
			}
			raw := b[1+k : 1+k+int(l)]
			b = b[1+k+int(l):]
			m := &raftpb.Message{}
			if proto.Unmarshal(raw, m) != nil {
				continue
			}
			if sel&2 != 0 {
				h.rn.Tick()
				h.drain()
			}
			h.deliver(m, 2+uint64(sel&1))
			if m.GetType() != raftpb.MessageType_MsgApp && m.GetType() != raftpb.MessageType_MsgSnap {
				h.drain()
			}
		}
		h.drain()
	})
}

// FuzzFwdPropose: a FwdPropose request as the leader judges it: each command
// decoded and authorised for the calling member. What passes is a command a
// member may issue, of the caller's own session (or of one that is closed),
// or the caller's own opening with a TTL in range.
func FuzzFwdPropose(f *testing.F) {
	sessions := map[uint64]uint64{10: 2, 11: 3} // session -> member
	owner := func(s uint64) (uint64, bool) {
		if m, ok := sessions[s]; ok {
			return m, true
		}
		return 0, s <= 20 // applied through 20: closed; beyond: cannot tell yet
	}
	for _, c := range []lockfsm.Command{
		{Kind: lockfsm.KindAcquire, Session: 10, Seq: 1, Name: "n", Owner: "o", Wait: true},
		{Kind: lockfsm.KindRelease, Session: 11, Seq: 2, Name: "n", Owner: "o"},
		{Kind: lockfsm.KindExpireSession, Session: 11},
		{Kind: lockfsm.KindOpenSession, Node: 2, TTLMillis: 10000, Seq: 4},
	} {
		req := &transportpb.FwdProposeRequest{Commands: [][]byte{c.AppendEncode(nil)}}
		b, _ := proto.Marshal(req)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req := &transportpb.FwdProposeRequest{}
		if proto.Unmarshal(b, req) != nil {
			return
		}
		const from = 2
		for _, data := range req.GetCommands() {
			cmd, err := lockfsm.DecodeCommand(data)
			if err != nil {
				continue
			}
			if authoriseCommand(from, &cmd, owner, false) != nil {
				continue
			}
			rule, ok := forwardedKinds[cmd.Kind]
			require.True(t, ok, "%v passed", cmd.Kind)
			switch rule {
			case byNode:
				require.Equal(t, uint64(from), cmd.Node)
				require.True(t, validTTL(cmd.TTLMillis))
			case bySession:
				m, known := owner(cmd.Session)
				require.True(t, known)
				require.Contains(t, []uint64{0, from}, m)
			}
		}
	})
}

// FuzzFwdPushItems: the items of a push (and of a FwdPropose reply) as a
// light member turns them into lock results and events: never a panic, and
// values outside lockfsm's ranges stay out of range rather than wrapping
// into valid ones.
func FuzzFwdPushItems(f *testing.F) {
	items := []*transportpb.PushItem{
		pushResultItem(&lockfsm.Command{Kind: lockfsm.KindAcquire, Session: 3, Seq: 1}, lockfsm.Result{Status: lockfsm.Granted, Token: 9}),
		pushEventItem(&lockfsm.Event{Kind: lockfsm.EventGranted, Session: 3, Seq: 1, Name: "n", Owner: "o", Token: 9}),
	}
	b, _ := proto.Marshal(&transportpb.FwdPushRequest{Items: items})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		req := &transportpb.FwdPushRequest{}
		if proto.Unmarshal(b, req) != nil {
			return
		}
		for _, it := range req.GetItems() {
			if r := it.GetResult(); r != nil {
				cmd, res := pushedResult(r)
				if r.GetKind() > 255 {
					require.Equal(t, lockfsm.Kind(255), cmd.Kind)
				}
				_ = res
			} else if e := it.GetEvent(); e != nil {
				ev := pushedEvent(e)
				require.Equal(t, e.GetName(), ev.Name)
			}
		}
	})
}

// BenchmarkCheckRemote: what the guard adds per remote message (a 16-entry
// append, a heartbeat, an append response), before raft steps it.
//
//	go test -run '^$' -bench CheckRemote -benchmem ./node/
func BenchmarkCheckRemote(b *testing.B) {
	app := &raftpb.Message{Type: raftpb.MessageType_MsgApp.Enum(), From: new(uint64(2)), To: new(uint64(1)),
		Term: new(uint64(7)), LogTerm: new(uint64(7)), Index: new(uint64(100)), Commit: new(uint64(99))}
	for i := uint64(101); i <= 116; i++ {
		app.Entries = append(app.Entries, &raftpb.Entry{Index: new(i), Term: new(uint64(7)), Type: raftpb.EntryNormal.Enum(),
			Data: make([]byte, 40)})
	}
	hb := &raftpb.Message{Type: raftpb.MessageType_MsgHeartbeat.Enum(), From: new(uint64(2)), To: new(uint64(1)),
		Term: new(uint64(7)), Commit: new(uint64(99))}
	resp := &raftpb.Message{Type: raftpb.MessageType_MsgAppResp.Enum(), From: new(uint64(3)), To: new(uint64(1)),
		Term: new(uint64(7)), Index: new(uint64(116))}
	v := raftView{id: 1, term: 7, lead: 2, lastIndex: 116}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		for _, m := range []*raftpb.Message{app, hb, resp} {
			if err := checkRemote(m, v); err != nil {
				b.Fatal(err)
			}
		}
	}
}
