package raftlog

import (
	"fmt"
	"runtime"
	"testing"
	"time"

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

// BenchmarkOpenWAL measures what a restart pays to open a WAL whose tail
// segment holds a long compacted history (46 MB of entries of which the last
// 7,700 are live): the time to open it, the bytes allocated while opening,
// and the heap still live afterwards.
//
//	go test -run '^$' -bench OpenWAL -benchtime 5x ./raftlog/
func BenchmarkOpenWAL(b *testing.B) {
	dir := b.TempDir()
	w, err := OpenWAL(dir, Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 140)
	const total, live = 300_000, 7_700
	next := uint64(1)
	for next <= total {
		ents := make([]*raftpb.Entry, 0, 256)
		for len(ents) < 256 && next <= total {
			ents = append(ents, &raftpb.Entry{Index: new(next), Term: new(uint64(1)), Data: payload})
			next++
		}
		if err := w.Save(nil, &raftpb.HardState{Term: new(uint64(1)), Commit: new(next - 1)}, ents); err != nil {
			b.Fatal(err)
		}
		if c := next - 1; c > live && c%4096 < 256 {
			if err := w.Compact(c - live); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := w.Compact(total - live); err != nil {
		b.Fatal(err)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	var ms0, ms1 runtime.MemStats
	var el time.Duration
	var alloc, heap uint64
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&ms0)
		start := time.Now()
		w, err := OpenWAL(dir, Options{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		el += time.Since(start)
		runtime.ReadMemStats(&ms1)
		alloc += ms1.TotalAlloc - ms0.TotalAlloc
		runtime.GC()
		runtime.ReadMemStats(&ms1)
		heap += ms1.HeapAlloc - ms0.HeapAlloc
		if li, _ := w.LastIndex(); li != total {
			b.Fatalf("last %d", li)
		}
		w.Close()
	}
	n := float64(b.N)
	b.ReportMetric(el.Seconds()*1000/n, "open-ms")
	b.ReportMetric(float64(alloc)/n/(1<<20), "alloc-MiB")
	b.ReportMetric(float64(heap)/n/(1<<20), "live-MiB")
}
