package simnet

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/internal/nettest"
	"github.com/lockraft/lockraft/transport"
)

// recorder is a Handler that records what it is told, with the time.
type recorder = nettest.Recorder

// counter returns an onReceive that closes the returned channel once want
// messages have been received.
func counter(want int) (func([]*raftpb.Message), <-chan struct{}) {
	var (
		mu   sync.Mutex
		got  int
		done = make(chan struct{})
	)
	return func(msgs []*raftpb.Message) {
		mu.Lock()
		defer mu.Unlock()
		if got < want && got+len(msgs) >= want {
			close(done)
		}
		got += len(msgs)
	}, done
}

// node is one started endpoint with its recorder.
type node struct {
	ep  *Endpoint
	rec *recorder
	dir string
}

const testCluster = "sim-cluster"

// config is the Config of node id in the test cluster.
func config(t testing.TB, id uint64, rec *recorder) transport.Config {
	return transport.Config{
		ClusterID:   testCluster,
		LocalID:     id,
		SnapshotDir: filepath.Join(t.TempDir(), fmt.Sprint(id)),
		Handler:     rec,
		Version:     fmt.Sprintf("v%d", id),
	}
}

// start starts id's endpoint with cfg adjusted by adjust (may be nil).
func start(t testing.TB, n *Network, id uint64, adjust func(*transport.Config)) *node {
	t.Helper()
	rec := &recorder{ID: id}
	cfg := config(t, id, rec)
	if adjust != nil {
		adjust(&cfg)
	}
	tn, err := n.Start(cfg)
	if err != nil {
		t.Fatalf("start %d: %v", id, err)
	}
	return &node{ep: tn.(*Endpoint), rec: rec, dir: cfg.SnapshotDir}
}

// cluster starts endpoints 1..size, each a peer of every other.
func cluster(t testing.TB, n *Network, size int) map[uint64]*node {
	t.Helper()
	nodes := make(map[uint64]*node)
	for id := uint64(1); id <= uint64(size); id++ {
		nodes[id] = start(t, n, id, nil)
	}
	connect(nodes)
	return nodes
}

// newCluster makes the network of seed with opts and starts endpoints
// 1..size on it, as cluster does. The network closes when the test ends,
// before the endpoints' directories are removed.
func newCluster(t testing.TB, seed uint64, size int, opts ...Option) (*Network, map[uint64]*node) {
	t.Helper()
	n := New(seed, opts...)
	nodes := cluster(t, n, size)
	t.Cleanup(func() { _ = n.Close() })
	return n, nodes
}

func connect(nodes map[uint64]*node) {
	for _, a := range nodes {
		for id := range nodes {
			a.ep.AddPeer(id, Addr(id))
		}
	}
}

// app is a MsgApp from→to carrying index, which the tests use to tell
// messages apart.
func app(from, to, index uint64) *raftpb.Message {
	t := raftpb.MessageType_MsgApp
	return &raftpb.Message{Type: &t, From: &from, To: &to, Term: proto.Uint64(1), Index: &index,
		Entries: []*raftpb.Entry{{Data: []byte(fmt.Sprintf("entry %d", index))}}}
}

func msg(typ raftpb.MessageType, from, to uint64) *raftpb.Message {
	return &raftpb.Message{Type: &typ, From: &from, To: &to, Term: proto.Uint64(1)}
}

// seq returns 1..n.
func seq(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}
