package node

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
)

// An acknowledgement is dropped only when a later one to the same node, of
// the same term, covers its index; rejections and other messages are kept.
func TestCoalesceAppResps(t *testing.T) {
	ack := func(to, term, index uint64) *raftpb.Message {
		return &raftpb.Message{Type: raftpb.MessageType_MsgAppResp.Enum(), To: &to, Term: &term, Index: &index}
	}
	reject := ack(1, 2, 5)
	reject.Reject = new(bool)
	*reject.Reject = true
	vote := &raftpb.Message{Type: raftpb.MessageType_MsgVoteResp.Enum(), To: new(uint64(1))}
	type c struct {
		name string
		in   []*raftpb.Message
		keep []int // indexes of in that remain
	}
	for _, tt := range []c{
		{"later ack covers earlier", []*raftpb.Message{ack(1, 2, 5), ack(1, 2, 7)}, []int{1}},
		{"equal index", []*raftpb.Message{ack(1, 2, 7), ack(1, 2, 7)}, []int{1}},
		{"lower later index keeps both", []*raftpb.Message{ack(1, 2, 7), ack(1, 2, 5)}, []int{0, 1}},
		{"other term kept", []*raftpb.Message{ack(1, 2, 5), ack(1, 3, 7)}, []int{0, 1}},
		{"other node kept", []*raftpb.Message{ack(1, 2, 5), ack(3, 2, 7)}, []int{0, 1}},
		{"reject never dropped nor covering", []*raftpb.Message{reject, ack(1, 2, 5), vote, ack(1, 2, 9)}, []int{0, 2, 3}},
		{"reject is not covered", []*raftpb.Message{ack(1, 2, 4), reject}, []int{0, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]*raftpb.Message(nil), tt.in...)
			var want []*raftpb.Message
			for _, i := range tt.keep {
				want = append(want, tt.in[i])
			}
			require.Equal(t, want, coalesceAppResps(in))
		})
	}
}
