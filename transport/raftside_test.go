package transport

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/transport/transportpb"
)

// TestCalledPeerStartsNoRaftSide (a replica's memory and
// goroutines): a peer that is only called — as a light member is by its
// leader — gets no message queue and no writer or snapshot goroutine; the
// first raft message starts them and is delivered.
func TestCalledPeerStartsNoRaftSide(t *testing.T) {
	a, b := newNode(t, "c1", 1), newNode(t, "c1", 2)
	connect(a, b)
	_, err := a.t.Keepalive(context.Background(), 2, &transportpb.KeepaliveRequest{Session: 7})
	require.NoError(t, err)
	p, err := a.t.peer(2)
	require.NoError(t, err)
	require.False(t, p.raftOn.Load(), "a call started the peer's raft side")
	require.Nil(t, p.queue)

	a.t.Send([]*raftpb.Message{msgApp(1, 2, 1)})
	require.True(t, p.raftOn.Load())
	require.Eventually(t, func() bool { got, _ := b.rec.received(); return len(got) == 1 }, waitFor, tick)
}

// TestSendRacesClose: messages sent while the transport closes start no
// goroutine that Close does not wait for (run with -race; a late start
// would be a WaitGroup reuse or a goroutine left running).
func TestSendRacesClose(t *testing.T) {
	a, b := newNode(t, "c1", 1), newNode(t, "c1", 2)
	connect(a, b)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range uint64(200) {
				a.t.Send([]*raftpb.Message{msgApp(1, 2, i+1)})
			}
		})
	}
	require.NoError(t, a.t.Close())
	wg.Wait()
}
