package fleet

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/lockfsm"
)

// A session's end in runs is proposed only once every other member of the
// configuration is known to run 0.3 or later (S7: a 0.2 replica would stop
// at the first such entry); the leader refuses a forwarded one before that,
// and the gate stays open once open.
func TestRunsGate(t *testing.T) {
	for v, want := range map[string]bool{"lockraft/0.3": true, "lockraft/0.10": true, "lockraft/1.0": true,
		"lockraft/0.2": false, "lockraft/0.2-rc1": false, "": false, "other/0.3": false} {
		require.Equal(t, want, atLeast(v, runsVersion), v)
	}
	f, h := newTestFleet(t, nil, nil, nil)
	f.list = nil // static: versions from the transport's headers
	h.lead = Leadership{Leader: 1, Leading: true, Active: true, Term: 3}
	h.conf = &raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	runs := (&lockfsm.Command{Kind: lockfsm.KindCloseSession, Session: 9, Limit: 64}).AppendEncode(nil)
	require.Equal(t, byte(3), runs[0])
	whole := (&lockfsm.Command{Kind: lockfsm.KindCloseSession, Session: 9}).AppendEncode(nil)

	h.net.versions[2] = "lockraft/0.3"
	require.False(t, f.RunsOpen(), "member 3 not heard from")
	h.net.versions[3] = "lockraft/0.2"
	require.False(t, f.RunsOpen(), "member 3 runs 0.2")
	require.ErrorIs(t, f.AdmitForwarded(runs, false), errOlder)
	require.NoError(t, f.AdmitForwarded(whole, false))
	require.NoError(t, f.AdmitForwarded(catalogueEntry(), false), "0.2 has the catalogue")

	h.net.versions[3] = "lockraft/0.3"
	require.True(t, f.RunsOpen())
	require.NoError(t, f.AdmitForwarded(runs, true))
	h.net.versions[3] = "lockraft/0.2"
	require.True(t, f.RunsOpen(), "once open, open for the life of the process")
}
