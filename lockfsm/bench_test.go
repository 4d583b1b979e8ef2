package lockfsm

import (
	"fmt"
	"path/filepath"
	"testing"
)

// benchStream generates a realistic stream on the fly: 64 sessions, each acquiring and releasing names out
// of 4096, one in eight acquires contending on a hot name (wait + handoff), AckedBelow trailing the
// sequence by 8 as a live node would send. Encoding happens into a reused buffer (part of the measured cost).
type benchStream struct {
	names []string
	seq   []uint64
	i     int
	rel   bool
	cur   Command
	buf   []byte
}

const benchSessions = 64

func newBenchStream() *benchStream {
	st := &benchStream{seq: make([]uint64, benchSessions+1)}
	for i := range 4096 {
		st.names = append(st.names, fmt.Sprintf("job/%d", i))
	}
	return st
}

func (st *benchStream) next() []byte {
	if !st.rel {
		s := uint64(st.i%benchSessions + 1)
		name, wait := st.names[st.i%len(st.names)], false
		if st.i%8 == 0 {
			name, wait = "hot", true
		}
		st.cur = Command{Kind: KindAcquire, Session: s, Name: name, Owner: "worker", Wait: wait}
		st.i++
	} else {
		st.cur.Kind = KindRelease
	}
	st.rel = !st.rel
	s := st.cur.Session
	st.seq[s]++
	st.cur.Seq, st.cur.AckedBelow = st.seq[s], st.seq[s]-min(st.seq[s], 8)
	st.buf = st.cur.AppendEncode(st.buf[:0])
	return st.buf
}

func benchApply(b *testing.B, commitEvery int, opts Options) {
	f := mustOpen(b, filepath.Join(b.TempDir(), "bench.db"), opts)
	defer func() { _ = f.Close() }()
	idx := uint64(0)
	for s := 1; s <= benchSessions; s++ {
		idx++
		f.ApplyCommand(idx, &Command{Kind: KindOpenSession, Node: uint64(s), TTLMillis: 5000}, nil)
	}
	st := newBenchStream()
	ev := make([]Event, 0, 16)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		idx++
		var r Result
		r, ev = f.Apply(idx, st.next(), ev[:0])
		if r.Err != nil && r.Err != ErrNotHolder && r.Err != ErrAlreadyWaiting {
			b.Fatalf("entry %d: %v", i, r.Err)
		}
		if commitEvery > 0 && (i+1)%commitEvery == 0 {
			if err := f.commit(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkApply: in-memory apply only (no commit).
func BenchmarkApply(b *testing.B) { benchApply(b, 0, Options{}) }

// BenchmarkApplyCommit1000: apply plus a commit (one bbolt transaction, fsync on) every 1000 entries.
func BenchmarkApplyCommit1000(b *testing.B) { benchApply(b, 1000, Options{}) }
