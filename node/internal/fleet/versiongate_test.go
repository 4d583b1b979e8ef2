package fleet

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/membership"
)

func TestKnowsCatalogue(t *testing.T) {
	for v, want := range map[string]bool{"lockraft/0.2": true, "lockraft/0.3": true, "lockraft/0.10": true, "lockraft/1.0": true,
		"lockraft/0.1": false, "": false, "lockraft/": false, "other/0.3": false, "lockraft/0.2-rc1": true} {
		require.Equal(t, want, knowsCatalogue(v), v)
	}
}

// The leader's gate: open once every other member of the configuration is
// known to run the catalogue (and then for good, recorded), older as soon
// as one is known not to, unknown while one has not been heard from.
func TestGateDecision(t *testing.T) {
	var members []membership.Member
	f, h := newTestFleet(t, nil, nil, &members)
	f.list = nil // static: versions from the transport's headers
	h.lead = Leadership{Leader: 1, Leading: true, Active: true, Term: 3}
	h.conf = &raftpb.ConfState{Voters: []uint64{1, 2}, Learners: []uint64{3}}
	h.net.versions[2] = "lockraft/0.2"
	st, who, _ := f.localGate()
	require.Equal(t, gateUnknown, st)
	require.Equal(t, uint64(3), who)
	h.net.versions[3] = "lockraft/0.1"
	st, who, ver := f.localGate()
	require.Equal(t, gateOlder, st)
	require.Equal(t, uint64(3), who)
	require.Equal(t, "lockraft/0.1", ver)
	require.True(t, f.OlderMemberKnown())
	require.ErrorIs(t, f.AdmitForwarded(catalogueEntry(), false), errOlder)

	h.net.versions[3] = "lockraft/0.3"
	st, _, _ = f.localGate()
	require.Equal(t, gateOpen, st)
	require.Empty(t, h.files, "no data directory: not recorded")
	h.net.versions[3] = "lockraft/0.1"
	st, _, _ = f.localGate()
	require.Equal(t, gateOpen, st, "once open, open for the life of the process")

	// Gossip metadata comes first.
	g, gh := newTestFleet(t, &membership.Config{BootstrapExpect: 1}, nil, &members)
	gh.conf = &raftpb.ConfState{Voters: []uint64{1, 2}}
	gh.net.versions[2] = "lockraft/0.2"
	members = []membership.Member{{Meta: membership.Meta{RaftID: 2, Version: "lockraft/0.1"}}}
	st, _, _ = g.localGate()
	require.Equal(t, gateOlder, st)
}

func TestGateRecorded(t *testing.T) {
	dir := t.TempDir()
	f, h := newTestFleet(t, nil, nil, nil)
	f.cfg.DataDir = dir
	h.conf = &raftpb.ConfState{Voters: []uint64{1}}
	require.False(t, f.GateOpen())
	require.Nil(t, f.AdmitForwarded(catalogueEntry(), true), "alone: open")
	require.True(t, f.GateOpen())
	require.Equal(t, "open\n", h.files[GateFile])

	require.NoError(t, os.WriteFile(filepath.Join(dir, GateFile), []byte("open\n"), 0o600))
	g, _ := newTestFleet(t, nil, nil, nil)
	require.False(t, g.GateOpen())
	g.cfg.DataDir = dir
	g.loadGate()
	require.True(t, g.GateOpen(), "a restarted node need not hear from every member again")
}

// What a leader admits of forwarded entries: the mutex always; a catalogue
// entry from a light member only through an open gate, from a follower
// unless a member is known to be older; never a newer format.
func TestAdmitForwarded(t *testing.T) {
	f, h := newTestFleet(t, nil, nil, nil)
	h.conf = &raftpb.ConfState{Voters: []uint64{1, 2}}
	mutex := (&lockfsm.Command{Kind: lockfsm.KindAcquire, Session: 1, Seq: 1, Name: "m", Owner: "o"}).AppendEncode(nil)
	require.Equal(t, byte(1), mutex[0])
	require.NoError(t, f.AdmitForwarded(mutex, true))
	require.NoError(t, f.AdmitForwarded(nil, true))
	require.Error(t, f.AdmitForwarded([]byte{9, 1, 2}, false), "a newer format")

	require.ErrorIs(t, f.AdmitForwarded(catalogueEntry(), true), errOlder, "unknown: a light member waits")
	require.NoError(t, f.AdmitForwarded(catalogueEntry(), false), "unknown: a follower's entry passes")
	h.net.versions[2] = "lockraft/0.1"
	require.ErrorIs(t, f.AdmitForwarded(catalogueEntry(), false), errOlder)

	ents := []*raftpb.Entry{{Data: mutex}, {Data: catalogueEntry()}, {Type: raftpb.EntryConfChangeV2.Enum()}, {Data: mutex}}
	kept := f.AdmitProposals(ents)
	require.Len(t, kept, 3)
	require.Equal(t, mutex, kept[0].GetData())
	require.Equal(t, raftpb.EntryConfChangeV2, kept[1].GetType())
	require.Equal(t, mutex, kept[2].GetData())
	all := []*raftpb.Entry{{Data: mutex}}
	require.Same(t, &all[0], &f.AdmitProposals(all)[0], "nothing refused: the same slice")
}

// catalogueEntry is a version-2 command (a shared read-write lock).
func catalogueEntry() []byte {
	c := lockfsm.Command{Kind: lockfsm.KindAcquire, Session: 1, Seq: 2, Name: "rw", Owner: "o",
		Primitive: lockfsm.PrimRW, Mode: lockfsm.ModeShared}
	return c.AppendEncode(nil)
}
