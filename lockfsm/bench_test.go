package lockfsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"
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

// BenchmarkRestore: a table of held locks (50,000 by default, LOCKFSM_BENCH_LOCKS to change it; 1,000
// sessions) read from a snapshot and installed in a fresh FSM's file, as a member does that receives the
// leader's snapshot, then the file opened again, as a member does that restarts on its data directory.
// Reports each step's time (read_ms, write_ms, load_ms) and the whole restore with the reading and the
// writing at once, as a member runs it (restore_ms); the source table is dropped before the clock starts.
//
//	go test -run '^$' -bench Restore -benchtime 3x ./lockfsm/
//	LOCKFSM_BENCH_LOCKS=1000000 go test -run '^$' -bench Restore -benchtime 1x ./lockfsm/
func BenchmarkRestore(b *testing.B) {
	locks, sessions := 50_000, 1_000
	if n, err := strconv.Atoi(os.Getenv("LOCKFSM_BENCH_LOCKS")); err == nil && n > 0 {
		locks = n
	}
	snap := func() []byte {
		src := mustOpen(b, filepath.Join(b.TempDir(), "src.db"), Options{})
		defer func() { _ = src.Close() }()
		idx := uint64(0)
		for s := 1; s <= sessions; s++ {
			idx++
			src.ApplyCommand(idx, &Command{Kind: KindOpenSession, Node: uint64(s), TTLMillis: 5000}, nil)
		}
		seq := make([]uint64, sessions+1)
		for i := range locks {
			s := uint64(i%sessions + 1)
			seq[s]++
			idx++
			c := Command{Kind: KindAcquire, Session: s, Seq: seq[s], Name: fmt.Sprintf("scale/%d", i), Owner: fmt.Sprintf("owner-%d", i%1000)}
			if r, _ := src.ApplyCommand(idx, &c, nil); r.Err != nil {
				b.Fatal(r.Err)
			}
		}
		var buf bytes.Buffer
		if err := src.WriteSnapshot(&buf); err != nil {
			b.Fatal(err)
		}
		return buf.Bytes()
	}()
	runtime.GC()
	var read, write, load, both time.Duration
	b.ResetTimer()
	for range b.N {
		other := mustOpen(b, filepath.Join(b.TempDir(), "both.db"), Options{})
		t := time.Now()
		// Eight runs ahead, as node's committer runs it.
		if _, err := restoreWhileReading(other, snap, 8); err != nil {
			b.Fatal(err)
		}
		both += time.Since(t)
		_ = other.Close()
		other = nil
		runtime.GC()

		path := filepath.Join(b.TempDir(), "dst.db")
		dst := mustOpen(b, path, Options{})
		t0 := time.Now()
		rs, err := ReadRestore(bytes.NewReader(snap))
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := dst.WriteRestore(rs); err != nil {
			b.Fatal(err)
		}
		dst.InstallRestore(rs)
		t2 := time.Now()
		_ = dst.Close()
		rs, dst = nil, nil
		runtime.GC()
		t3 := time.Now()
		dst = mustOpen(b, path, Options{})
		if got := dst.Stats().Held; got != locks {
			b.Fatalf("reopened with %d locks, want %d", got, locks)
		}
		read, write, load = read+t1.Sub(t0), write+t2.Sub(t1), load+time.Since(t3)
		_ = dst.Close()
	}
	b.ReportMetric(float64(read.Milliseconds())/float64(b.N), "read_ms")
	b.ReportMetric(float64(write.Milliseconds())/float64(b.N), "write_ms")
	b.ReportMetric(float64(load.Milliseconds())/float64(b.N), "load_ms")
	b.ReportMetric(float64(both.Milliseconds())/float64(b.N), "restore_ms")
	b.ReportMetric(float64(len(snap))/float64(locks), "snapshot_B/lock")
}

// BenchmarkEndSession: one session holding N locks (50,000 by default, LOCKFSM_BENCH_LOCKS to change it)
// expires with a lock-delay, as a member's session does when its process dies; each entry of its end is
// applied, then the commit batch for it is encoded (PrepareCommit, on the node's loop) and written
// (WriteCommit, on the committer). "whole": the end in one entry (version 2, and a node whose version gate
// is not open). "runs": in runs of DefaultSessionEndRun names (version 3); "runs-nodelay" without the
// lock-delay, so that the lock table empties (and shrinks) as the runs go. Reports the steps' total time,
// the longest entry (apply + prepare: what holds a node's loop), the first entry and the longest of the
// others, the entries and the events.
//
//	LOCKFSM_BENCH_LOCKS=1000000 go test -run '^$' -bench EndSession -benchtime 1x ./lockfsm/
func BenchmarkEndSession(b *testing.B) {
	locks := 50_000
	if n, err := strconv.Atoi(os.Getenv("LOCKFSM_BENCH_LOCKS")); err == nil && n > 0 {
		locks = n
	}
	for _, c := range []struct {
		name  string
		run   uint32
		delay uint64
	}{{"whole", 0, 1000}, {"runs", DefaultSessionEndRun, 1000}, {"runs-nodelay", DefaultSessionEndRun, 0}} {
		b.Run(c.name, func(b *testing.B) { benchEndSession(b, locks, c.run, c.delay) })
	}
}

func benchEndSession(b *testing.B, locks int, run uint32, delay uint64) {
	var apply, prepare, write, first, longest, later time.Duration
	events, entries := 0, 0
	for range b.N {
		b.StopTimer()
		f := mustOpen(b, filepath.Join(b.TempDir(), "end.db"), Options{NoSync: true})
		f.ApplyCommand(1, &Command{Kind: KindOpenSession, Node: 1, TTLMillis: 5000}, nil)
		idx := uint64(1)
		for i := range locks {
			idx++
			c := Command{Kind: KindAcquire, Session: 1, Seq: uint64(i + 1), Name: fmt.Sprintf("scale/%d", i), Owner: "o"}
			if r, _ := f.ApplyCommand(idx, &c, nil); r.Err != nil {
				b.Fatal(r.Err)
			}
		}
		if err := f.WriteCommit(f.PrepareCommit()); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		b.StartTimer()
		c := Command{Kind: KindExpireSession, Session: 1, LockDelayMillis: delay, Limit: run}
		for f.HasSession(1) {
			idx++
			t0 := time.Now()
			r, ev := f.ApplyCommand(idx, &c, nil)
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			t1 := time.Now()
			batch := f.PrepareCommit()
			t2 := time.Now()
			if err := f.WriteCommit(batch); err != nil {
				b.Fatal(err)
			}
			apply, prepare, write = apply+t1.Sub(t0), prepare+t2.Sub(t1), write+time.Since(t2)
			longest = max(longest, t2.Sub(t0))
			if c.Kind == KindExpireSession {
				first = max(first, t2.Sub(t0))
			} else {
				later = max(later, t2.Sub(t0))
			}
			events += len(ev)
			entries++
			c = Command{Kind: KindEndSessionRun, Session: 1, Limit: run}
		}
		b.StopTimer()
		_ = f.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(apply.Milliseconds())/float64(b.N), "apply_ms")
	b.ReportMetric(float64(prepare.Milliseconds())/float64(b.N), "prepare_ms")
	b.ReportMetric(float64(write.Milliseconds())/float64(b.N), "write_ms")
	b.ReportMetric(float64(longest.Microseconds())/1000, "longest_entry_ms")
	b.ReportMetric(float64(first.Microseconds())/1000, "first_entry_ms")
	b.ReportMetric(float64(later.Microseconds())/1000, "longest_later_ms")
	b.ReportMetric(float64(entries)/float64(b.N), "entries")
	b.ReportMetric(float64(events)/float64(b.N), "events")
}

// BenchmarkTableMemory is the lock table's own memory per held lock: one session takes LOCKFSM_BENCH_LOCKS
// names (300,000 unless set), committing every 2,000, then the live heap after a collection and the state
// file's size are divided by the names. "seq" takes the names in the order scalelocks does (scale/0,
// scale/1, ...), "random" in a shuffled order. A replica's RSS per lock is this heap plus the Go runtime's
// room, raft's and the node's share and the file's pages it has read (bench/cmd/scalelocks).
//
//	go test -run '^$' -bench TableMemory -benchtime 1x ./lockfsm/
func BenchmarkTableMemory(b *testing.B) {
	locks := 300_000
	if n, err := strconv.Atoi(os.Getenv("LOCKFSM_BENCH_LOCKS")); err == nil && n > 0 {
		locks = n
	}
	for _, order := range []string{"seq", "random"} {
		b.Run(order, func(b *testing.B) {
			names := make([]int, locks)
			for i := range names {
				names[i] = i
			}
			if order == "random" {
				rand.New(rand.NewPCG(1, 2)).Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
			}
			var heap, file float64
			for range b.N {
				b.StopTimer()
				path := filepath.Join(b.TempDir(), "mem.db")
				f := mustOpen(b, path, Options{NoSync: true})
				f.ApplyCommand(1, &Command{Kind: KindOpenSession, Node: 1, TTLMillis: 5000}, nil)
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				b.StartTimer()
				for i, n := range names {
					c := Command{Kind: KindAcquire, Session: 1, Seq: uint64(i + 1), AckedBelow: uint64(i + 1),
						Name: fmt.Sprintf("scale/%d", n), Owner: fmt.Sprintf("owner-%d", n%1000)}
					if r, _ := f.ApplyCommand(uint64(i+2), &c, nil); r.Err != nil {
						b.Fatal(r.Err)
					}
					if i%2000 == 0 {
						if err := f.WriteCommit(f.PrepareCommit()); err != nil {
							b.Fatal(err)
						}
					}
				}
				if err := f.WriteCommit(f.PrepareCommit()); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&after)
				st, err := os.Stat(path)
				if err != nil {
					b.Fatal(err)
				}
				heap += (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(locks)
				file += float64(st.Size()) / float64(locks)
				runtime.KeepAlive(f)
				_ = f.Close()
				b.StartTimer()
			}
			b.ReportMetric(heap/float64(b.N), "heap_B/lock")
			b.ReportMetric(file/float64(b.N), "file_B/lock")
		})
	}
}
