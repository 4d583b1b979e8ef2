package raftlog

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// defaultSegmentSize is the size after which the WAL starts a new segment.
// Compaction deletes whole segments, so it also bounds the history that is
// kept on disk after compaction passed it, which a restart reads through:
// 8 MiB is about 80,000 Lock+Unlock pairs, many compactions' worth, and a
// new segment (a file and a directory fsync) that often costs nothing
// measurable.
const defaultSegmentSize = 8 << 20

// WAL is a raft log kept as an append-only, segmented write-ahead log in a directory:
// the second engine behind [Log], with the same semantics as [Storage]. Each write
// method appends its records (see record.go) with ONE write and ONE fdatasync (plus a
// directory fsync when it starts a new segment). Every entry after the compaction point
// is kept in memory, so raft's reads never touch the disk; the node's compaction bounds
// that memory. A torn tail record (a crash mid-write, never acknowledged) is cut off on
// open; damage anywhere else gives errCorrupt naming the file. It is safe for concurrent
// use.
type WAL struct {
	// wmu serializes the writers (Save, CreateSnapshot, Compact, SetConfState,
	// Bootstrap, Close) and guards the files; it is held across the write and
	// fdatasync. mu guards the in-memory state that raft reads (st, closed)
	// and is held only briefly: a writer takes it, after its fdatasync, to
	// publish the new state. So raft's reads (Term, Entries, LastIndex …) on
	// the node loop never wait for the disk while the node's appender syncs.
	// Lock order: wmu, then mu. Readers take only mu; only a holder of wmu
	// changes st, so a writer reads st without mu.
	wmu      sync.Mutex
	mu       sync.Mutex
	dir      string
	log      *slog.Logger
	segSize  int64
	prealloc int64
	noSync   bool
	lockf    *os.File
	closed   bool
	failed   error // a write failed: the tail may hold garbage, refuse further writes

	segs  []*segment // in seq order; the last one is open for append in f
	f     *os.File
	size  int64 // bytes of records in f: where the next write goes
	alloc int64 // bytes in f (>= size; the rest is zero-filled preallocation)
	buf   []byte
	st    *walState
}

// OpenWAL opens the WAL in dir, creating dir (not its parents) if absent. Options'
// SegmentSize, LockTimeout, NoSync and Logger apply; the bbolt ones are ignored.
func OpenWAL(dir string, opts Options) (*WAL, error) {
	opts = opts.withDefaults()
	w := &WAL{dir: dir, log: opts.Logger.With("dir", dir), segSize: opts.SegmentSize, noSync: opts.NoSync,
		prealloc: max(opts.Preallocate, 0)}
	if err := os.Mkdir(dir, 0o700); err == nil {
		if err := syncDir(filepath.Dir(dir)); err != nil {
			return nil, fmt.Errorf("raftlog: open %s: %w", dir, err)
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("raftlog: open %s: %w", dir, err)
	}
	lockPath := filepath.Join(dir, "LOCK")
	lf, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("raftlog: open %s: %w", lockPath, err)
	}
	ok, err := lockFile(lf, opts.LockTimeout)
	if err != nil || !ok {
		_ = lf.Close()
		if err != nil {
			return nil, fmt.Errorf("raftlog: lock %s: %w", lockPath, err)
		}
		return nil, fmt.Errorf("%w: %s", errLocked, dir)
	}
	w.lockf = lf
	if err := w.load(); err != nil {
		w.closeFiles()
		return nil, err
	}
	w.log.Debug("raftlog WAL opened", "segments", len(w.segs), "first", w.st.dummyIndex+1, "last", w.st.last)
	return w, nil
}

func (w *WAL) corrupt(path string, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", errCorrupt, path, fmt.Sprintf(format, args...))
}

// load replays every segment, cuts a torn tail and opens the last segment for append.
// Segments are streamed (segread.go), and entries that replay would compact away are
// not decoded; should that shortcut not hold, the segments are replayed again in full.
func (w *WAL) load() error {
	segs, err := listSegments(w.dir)
	if err != nil {
		return fmt.Errorf("raftlog: open %s: %w", w.dir, err)
	}
	floor := replayFloor(segs)
	segs, err = w.replay(segs, floor)
	if err == nil && !w.st.settled() {
		w.log.Warn("raftlog WAL: replay floor did not hold, replaying in full", "floor", floor, "compacted", w.st.dummyIndex)
		segs, err = w.replay(segs, 0)
	}
	if err != nil {
		return err
	}
	w.st.floor, w.st.skipped = 0, false
	if !w.st.complete() {
		return w.corrupt(w.dir, "entries (%d, %d) are missing (deleted segments)", w.st.dummyIndex, w.st.base)
	}
	w.segs = segs
	if len(segs) == 0 {
		w.st = newWalState()
		return w.createSegment(nil)
	}
	tail := segs[len(segs)-1]
	f, err := os.OpenFile(tail.path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("raftlog: open %s: %w", tail.path, err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("raftlog: stat %s: %w", tail.path, err)
	}
	w.f, w.alloc = f, st.Size()
	if w.size == 0 || w.size > w.alloc {
		w.size = w.alloc
	}
	return nil
}

// replay rebuilds w.st from segs (entries at or below floor held undecoded),
// cutting a torn tail, and returns the segments that remain.
func (w *WAL) replay(segs []*segment, floor uint64) ([]*segment, error) {
	w.st = newWalState()
	w.st.floor = floor
	for i, seg := range segs {
		if i > 0 && seg.seq != segs[i-1].seq+1 {
			return nil, w.corrupt(seg.path, "segment %d missing before it", segs[i-1].seq+1)
		}
		valid, torn, bad, err := scanSegmentFile(w.st, seg)
		if err != nil {
			return nil, fmt.Errorf("raftlog: read %s: %w", seg.path, err)
		}
		if bad != nil {
			return nil, w.corrupt(seg.path, "%v", bad)
		}
		if !torn {
			continue
		}
		data, err := readFrom(seg.path, valid)
		if err != nil {
			return nil, fmt.Errorf("raftlog: read %s: %w", seg.path, err)
		}
		if w.prealloc > 0 && i == len(segs)-1 && valid > 0 && allZero(data) {
			// Preallocated space after the last record (or a write of
			// which nothing reached the disk): the next write goes at valid.
			w.size = valid
			continue
		}
		if i < len(segs)-1 {
			return nil, w.corrupt(seg.path, "bad record at offset %d of %d (not the last segment)", valid, valid+int64(len(data)))
		}
		if p := findRecord(data, 1); p >= 0 {
			return nil, w.corrupt(seg.path, "bad record at offset %d followed by a valid one at %d", valid, valid+int64(p))
		}
		// A torn tail: the crash interrupted a write that was never acknowledged.
		w.log.Warn("raftlog WAL: cutting torn tail", "file", seg.path, "offset", valid, "bytes", len(data))
		if valid == 0 {
			// Not even the state record: a segment whose creation was interrupted.
			if err := os.Remove(seg.path); err != nil {
				return nil, fmt.Errorf("raftlog: remove %s: %w", seg.path, err)
			}
			if err := syncDir(w.dir); err != nil {
				return nil, fmt.Errorf("raftlog: sync %s: %w", w.dir, err)
			}
			segs = segs[:i]
			break
		}
		if err := truncateFile(seg.path, valid); err != nil {
			return nil, fmt.Errorf("raftlog: truncate %s: %w", seg.path, err)
		}
	}
	return segs, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// findRecord returns the first offset >= from where a valid top-level record starts, or
// -1. (Records inside a torn batch are not top-level, so they do not count.)
func findRecord(data []byte, from int) int {
	for p := from; p+recHeaderSize <= len(data); p++ {
		if typ, _, _, err := readRecord(data[p:]); err == nil && topLevel(typ) {
			return p
		}
	}
	return -1
}

func truncateFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	return f.Sync()
}

// createSegment starts a new segment holding the current state followed by recs, syncs
// it and the directory, and makes it the tail. The caller holds the mutex.
func (w *WAL) createSegment(recs []byte) error {
	var seq uint64
	if n := len(w.segs); n > 0 {
		seq = w.segs[n-1].seq + 1
	}
	sr := w.st.stateRecord()
	payload, err := sr.marshal()
	if err != nil {
		return err
	}
	buf := appendRecord(make([]byte, 0, recHeaderSize+len(payload)+len(recs)), recState, payload)
	buf = append(buf, recs...)
	seg := &segment{seq: seq, first: w.st.last + 1, last: w.st.last}
	seg.path = filepath.Join(w.dir, segmentName(seg.seq, seg.first))
	if w.f != nil && w.alloc > w.size {
		// Cut the preallocated zeros off the segment being closed: only the
		// last segment may end in them.
		if err := w.f.Truncate(w.size); err != nil {
			return err
		}
		if !w.noSync {
			if err := fdatasync(w.f); err != nil {
				return err
			}
		}
		w.alloc = w.size
	}
	f, err := os.OpenFile(seg.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(buf); err != nil {
		_ = f.Close()
		return err
	}
	if !w.noSync {
		if err := fdatasync(f); err != nil {
			_ = f.Close()
			return err
		}
		if err := syncDir(w.dir); err != nil {
			_ = f.Close()
			return err
		}
	}
	if w.f != nil {
		_ = w.f.Close()
	}
	w.f, w.size, w.alloc = f, int64(len(buf)), int64(len(buf))
	w.segs = append(w.segs, seg)
	return nil
}

// commit makes recs durable: one write and one fdatasync (a new segment first if the
// tail is full). Any failure is wrapped in errWrite, logged, and poisons later writes.
// The caller holds the mutex and applies the records to memory only on success.
func (w *WAL) commit(recs []byte) error {
	if w.failed != nil {
		return fmt.Errorf("%w: %s: an earlier write failed: %v", errWrite, w.dir, w.failed)
	}
	var err error
	if w.size >= w.segSize {
		err = w.createSegment(recs)
	} else {
		end := w.size + int64(len(recs))
		if w.prealloc > 0 && end > w.alloc {
			// Zero-fill the next chunk; this write's fdatasync makes the new
			// size durable, later writes in the chunk change no metadata.
			err = w.extend(end)
		}
		if err == nil {
			_, err = w.f.WriteAt(recs, w.size)
		}
		if err == nil && !w.noSync {
			err = fdatasync(w.f)
		}
		if err == nil {
			w.size = end
		}
	}
	if err != nil {
		w.failed = err
		w.log.Error("raftlog WAL write failed", "err", err)
		return fmt.Errorf("%w: %s: %v", errWrite, w.dir, err)
	}
	return nil
}

// extend zero-fills the tail segment from alloc up to at least end, in
// Preallocate chunks (to the next multiple of it).
func (w *WAL) extend(end int64) error {
	to := (end + w.prealloc - 1) / w.prealloc * w.prealloc
	for off := w.alloc; off < to; {
		n := min(int64(len(zeros)), to-off)
		if _, err := w.f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		off += n
	}
	w.alloc = to
	return nil
}

// zeros is the source of the zero-fill (never written to).
var zeros = make([]byte, 64<<10)

// dropSegments deletes the oldest segments when a later segment's state record already
// lies at or before the compaction point (so nothing they hold is still needed).
func (w *WAL) dropSegments() {
	j := -1
	for k := 1; k < len(w.segs); k++ {
		if w.segs[k].last <= w.st.dummyIndex {
			j = k - 1
		}
	}
	if j < 0 {
		return
	}
	for _, seg := range w.segs[:j+1] {
		if err := os.Remove(seg.path); err != nil {
			w.log.Warn("raftlog WAL: cannot remove segment", "file", seg.path, "err", err)
			w.segs = w.segs[slicesIndex(w.segs, seg):]
			return
		}
	}
	w.segs = append([]*segment(nil), w.segs[j+1:]...)
	if err := syncDir(w.dir); err != nil {
		w.log.Warn("raftlog WAL: sync dir", "err", err)
	}
}

func slicesIndex(segs []*segment, s *segment) int {
	for i := range segs {
		if segs[i] == s {
			return i
		}
	}
	return 0
}

// Save is [Storage.Save] on the WAL: snapshot, entries and HardState as records, in one
// write and one fdatasync.
func (w *WAL) Save(snap *raftpb.Snapshot, hs *raftpb.HardState, ents []*raftpb.Entry) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.closed {
		return errClosed
	}
	st := w.st
	c, err := st.planSave(snap, hs, ents)
	if err != nil {
		return err
	}
	if c.empty() {
		return nil
	}
	newSnap, ents, hsCopy := c.snap, c.ents, c.hs
	buf, start := beginBatch(w.buf[:0])
	if newSnap != nil {
		if buf, err = appendProtoRecord(buf, recSnapInstall, newSnap); err != nil {
			return err
		}
	}
	for _, e := range ents {
		if buf, err = appendProtoRecord(buf, recEntry, e); err != nil {
			return err
		}
	}
	if hsCopy != nil {
		if buf, err = appendProtoRecord(buf, recHardState, hsCopy); err != nil {
			return err
		}
	}
	buf = endBatch(buf, start)
	w.keepBuf(buf)
	if err := w.commit(buf); err != nil {
		return err
	}
	w.mu.Lock()
	if newSnap != nil {
		st.installSnapshot(newSnap)
	}
	for _, e := range ents {
		if err := st.appendEntry(e.GetIndex(), e); err != nil {
			w.mu.Unlock()
			panic(err) // trimEntries checked it
		}
	}
	if hsCopy != nil {
		st.hardState = hsCopy
	}
	w.mu.Unlock()
	if newSnap != nil {
		w.dropSegments()
	}
	return nil
}

// keepBuf keeps a modest buffer for reuse.
func (w *WAL) keepBuf(buf []byte) {
	if cap(buf) <= 1<<20 {
		w.buf = buf
	}
}

// CreateSnapshot is [Storage.CreateSnapshot] on the WAL.
func (w *WAL) CreateSnapshot(i uint64, cs *raftpb.ConfState, data []byte) (*raftpb.Snapshot, error) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.closed {
		return nil, errClosed
	}
	st := w.st
	snap, err := nextSnapshot(st.snap, st.last, i, w.term, cs, data)
	if err != nil {
		return nil, err
	}
	buf, err := appendProtoRecord(nil, recSnapCreate, snap)
	if err != nil {
		return nil, err
	}
	if err := w.commit(buf); err != nil {
		return nil, err
	}
	w.mu.Lock()
	st.snap = snap
	w.mu.Unlock()
	return proto.Clone(snap).(*raftpb.Snapshot), nil
}

// Compact is [Storage.Compact] on the WAL; segments entirely below the new compaction
// point are deleted.
func (w *WAL) Compact(index uint64) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.closed {
		return errClosed
	}
	if err := w.st.checkCompact(index); err != nil {
		return err
	}
	term, err := w.term(index)
	if err != nil {
		return err
	}
	if err := w.commit(appendRecord(nil, recCompact, compactPayload(index, term))); err != nil {
		return err
	}
	w.mu.Lock()
	err = w.st.compact(index, term)
	w.mu.Unlock()
	if err != nil {
		panic(err) // checked above
	}
	w.dropSegments()
	return nil
}

// SetConfState is [Storage.SetConfState] on the WAL.
func (w *WAL) SetConfState(cs *raftpb.ConfState, index uint64) error {
	if cs == nil {
		return fmt.Errorf("raftlog: nil ConfState")
	}
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.closed {
		return errClosed
	}
	c, v, err := encodeConfState(cs, index)
	if err != nil {
		return err
	}
	if err := w.commit(appendRecord(nil, recConfState, v)); err != nil {
		return err
	}
	w.mu.Lock()
	w.st.confState, w.st.confIndex = c, index
	w.mu.Unlock()
	return nil
}

// Bootstrap is [Storage.Bootstrap] on the WAL.
func (w *WAL) Bootstrap(cs *raftpb.ConfState) error {
	if err := checkBootstrap(cs); err != nil {
		return err
	}
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.closed {
		return errClosed
	}
	if w.st.hasState() {
		return fmt.Errorf("%w: %s", errNotEmpty, w.dir)
	}
	snap, hs := bootstrapState(cs)
	buf, start := beginBatch(nil)
	buf, err := appendProtoRecord(buf, recSnapInstall, snap)
	if err != nil {
		return err
	}
	if buf, err = appendProtoRecord(buf, recHardState, hs); err != nil {
		return err
	}
	if err := w.commit(endBatch(buf, start)); err != nil {
		return err
	}
	w.mu.Lock()
	w.st.installSnapshot(raftpb.EnsureSnapshot(snap))
	w.st.hardState = hs
	w.mu.Unlock()
	return nil
}

// Close closes the files and releases the directory lock. It is idempotent; later
// calls to other methods return errClosed.
func (w *WAL) Close() error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.closed {
		return nil
	}
	err := w.closeFiles()
	w.mu.Lock()
	w.closed = true
	w.st = newWalState()
	w.mu.Unlock()
	if err != nil {
		return fmt.Errorf("raftlog: close %s: %w", w.dir, err)
	}
	return nil
}

func (w *WAL) closeFiles() error {
	var err error
	if w.f != nil {
		err = w.f.Close()
		w.f = nil
	}
	if w.lockf != nil {
		_ = w.lockf.Close()
		w.lockf = nil
	}
	return err
}
