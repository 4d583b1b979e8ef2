package raftlog

import (
	"fmt"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// BenchmarkSave measures Save with 1 and 64 entries per call on a synced file, for both
// engines. Each Save is one commit (bbolt: one fsync pair; WAL: one write and one
// fdatasync), so ns/op is nearly flat and entries/s grows with the batch: run with
// -benchtime=200x or so, the disk dominates.
//
//	go test -run '^$' -bench Save -benchtime 500x ./raftlog/
func BenchmarkSave(b *testing.B) {
	for _, eng := range engines {
		for _, batch := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/entries=%d", eng.name, batch), func(b *testing.B) {
				benchSave(b, eng, batch)
			})
		}
	}
}

func benchSave(b *testing.B, eng engine, batch int) {
	s, _ := eng.openTemp(b, Options{})
	payload := make([]byte, 128)
	next := uint64(1)
	ents := make([]*raftpb.Entry, batch)
	hs := &raftpb.HardState{Term: new(uint64(1))}
	b.ResetTimer()
	for b.Loop() {
		for i := range ents {
			ents[i] = &raftpb.Entry{Index: new(next), Term: new(uint64(1)), Data: payload}
			next++
		}
		hs.Commit = new(next - 1)
		if err := s.Save(nil, hs, ents); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "entries/s")
}
