package lease

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/lockfsm"
)

// BenchmarkTickLeases: one leader tick (Tick, then DeadlineBefore, as the
// node's coarse tick calls them) with N leased holds, none due: the cost a
// table of leased locks puts on every tick of a quiet leader. N is 10,000,
// or LEASE_BENCH_HOLDS.
//
//	LEASE_BENCH_HOLDS=1000000 go test -run '^$' -bench TickLeases ./node/internal/lease/
func BenchmarkTickLeases(b *testing.B) {
	n := 10_000
	if v, err := strconv.Atoi(os.Getenv("LEASE_BENCH_HOLDS")); err == nil && v > 0 {
		n = v
	}
	f, err := lockfsm.Open(b.TempDir()+"/t.db", lockfsm.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	idx := uint64(1)
	f.ApplyCommand(idx, &lockfsm.Command{Kind: lockfsm.KindOpenSession, Node: 1, TTLMillis: 10_000}, nil)
	sess := idx
	for i := range n {
		idx++
		c := lockfsm.Command{Kind: lockfsm.KindAcquire, Session: sess, Seq: uint64(i + 1), Name: fmt.Sprintf("l/%07d", i),
			Owner: "o", LeaseMillis: 60_000}
		if r, _ := f.ApplyCommand(idx, &c, nil); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	now := time.Unix(1_000_000, 0)
	e := New(Config{Self: 1, KeepaliveInterval: 2500 * time.Millisecond, RetryInterval: time.Second,
		ElectionTimeout: time.Second, TickInterval: 100 * time.Millisecond}, &scriptHost{fsm: f}, now)
	e.BecomeLeader(2, &raftpb.ConfState{Voters: []uint64{1}})
	e.Ready(now)
	if !e.Active() {
		b.Fatal("not an active leader")
	}
	b.ResetTimer()
	for b.Loop() {
		now = now.Add(10 * time.Millisecond)
		if cmds := e.Tick(now); len(cmds) > 1 {
			b.Fatalf("%d commands from a quiet tick", len(cmds))
		}
		e.DeadlineBefore(now.Add(200 * time.Millisecond))
	}
}
