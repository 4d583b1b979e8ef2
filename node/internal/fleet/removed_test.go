package fleet

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/transport/transportpb"
)

// FuzzRemovedRequest: a removed notice as a node judges it. A notice it
// believes never lists it, comes from a voter of its own configuration, is
// not of an older term, and comes from the leader this node follows (or from
// a known voter while it follows none).
func FuzzRemovedRequest(f *testing.F) {
	b, _ := proto.Marshal(&transportpb.RemovedRequest{Term: 5, Applied: 100, Voters: []uint64{2, 3}})
	f.Add(b, uint64(2), uint64(2))
	f.Fuzz(func(t *testing.T, b []byte, from, lead uint64) {
		req := &transportpb.RemovedRequest{}
		if proto.Unmarshal(b, req) != nil {
			return
		}
		v := removedView{self: 1, term: 5, lead: lead % 4, applied: 50,
			conf: &raftpb.ConfState{Voters: []uint64{1, 2, 3}}, known: func(id uint64) bool { return id == 2 || id == 3 }}
		if removedVerdict(v, from, req) != nil {
			return
		}
		require.NotContains(t, req.GetVoters(), uint64(1))
		require.NotContains(t, req.GetLearners(), uint64(1))
		require.Contains(t, req.GetVoters(), from)
		require.GreaterOrEqual(t, req.GetTerm(), v.term)
		require.True(t, v.lead == 0 || v.lead == from)
	})
}
