package raftlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

var (
	// errCorrupt is returned by Open when the file is not a raftlog file (random bytes, a
	// truncated file, a bbolt file written by something else) or its contents contradict
	// each other. The file is left untouched.
	errCorrupt = errors.New("raftlog: corrupt or foreign log file")
	// errLocked is returned by Open when another Storage (in this or another process)
	// holds the file open.
	errLocked = errors.New("raftlog: log file is locked by another opener")
	// errWrite wraps a failed commit. It is fatal for the node: stop serving.
	errWrite = errors.New("raftlog: write failed")
	// errNotEmpty is returned by Bootstrap on a log that already has state.
	errNotEmpty = errors.New("raftlog: log is not empty")
	// errClosed is returned by every method called after Close.
	errClosed = errors.New("raftlog: storage closed")
)

// Defaults for Options.
const (
	defaultCacheEntries = 10000
	defaultLockTimeout  = time.Second
)

var (
	bucketLog  = []byte("log")
	bucketMeta = []byte("meta")

	keyMagic     = []byte("magic")
	keyHardState = []byte("hardstate")
	keyConfState = []byte("confstate")
	keySnapshot  = []byte("snapshot")
	keyCompacted = []byte("compacted")

	magic = []byte("lockraft/raftlog\x00v1")
)

// Options tunes Open. The zero value is ready to use.
type Options struct {
	// Logger receives open and write-failure records; nil discards them.
	Logger *slog.Logger
	// InitialMmapSize is passed to bbolt; a large value avoids remaps (which wait for
	// readers) as the file grows. 0 lets bbolt choose.
	InitialMmapSize int
	// CacheEntries is how many of the newest entries are kept in memory
	// (default defaultCacheEntries). Entries and Term on older ones read the file.
	CacheEntries int
	// LockTimeout bounds the wait for the file lock held by another opener before Open
	// fails with errLocked (default defaultLockTimeout).
	LockTimeout time.Duration
	// SegmentSize (WAL only) is the size after which a new segment file is started
	// (default defaultSegmentSize).
	SegmentSize int64
	// Preallocate (WAL only), when > 0, zero-fills the tail segment ahead of the
	// writes in chunks of this many bytes, so that a write lands in space that
	// already exists on disk and its fdatasync flushes data only: no file-size
	// change, so no filesystem journal commit per write (on ext4 about a fifth of
	// an fdatasync's cost, more when several files sync at once). Open treats an
	// all-zero tail after the last record as preallocated space, not as a torn
	// write; a segment is cut back to its records before the next one starts.
	Preallocate int64
	// NoSync skips fsync on commit. UNSAFE: a crash loses acknowledged writes and can
	// corrupt the file. For tests and benchmarks only.
	NoSync bool
}

// Storage is a raft.Storage on its own bbolt file; see the package documentation.
// It is safe for concurrent use.
type Storage struct {
	mu       sync.Mutex
	db       *bolt.DB
	path     string
	log      *slog.Logger
	cacheMax int
	closed   bool

	logState
	// tail holds entries (last-len(tail), last], the newest at the end.
	tail []*raftpb.Entry

	// beforeCommit, when set (tests only), runs inside every write transaction and
	// its error aborts it.
	beforeCommit func() error
}

var _ raft.Storage = (*Storage)(nil)

// withDefaults is o with the defaults in place of what it leaves zero (or negative).
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.CacheEntries <= 0 {
		o.CacheEntries = defaultCacheEntries
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = defaultLockTimeout
	}
	if o.SegmentSize <= 0 {
		o.SegmentSize = defaultSegmentSize
	}
	return o
}

// Open opens the log at path, creating it if absent. A file that is not a raftlog file
// gives an error wrapping errCorrupt; a file held open by another Storage gives one
// wrapping errLocked. Both name the file. Open never panics on a bad file.
func Open(path string, opts Options) (*Storage, error) {
	opts = opts.withDefaults()
	s := &Storage{path: path, log: opts.Logger.With("file", path), cacheMax: opts.CacheEntries}
	db, err := openBolt(path, opts)
	if err != nil {
		return nil, err
	}
	s.db = db
	if err := s.load(); err != nil {
		_ = db.Close()
		return nil, err
	}
	s.log.Debug("raftlog opened", "first", s.dummyIndex+1, "last", s.last, "snapshot", s.snap.GetMetadata().GetIndex())
	return s, nil
}

// openBolt opens the bbolt file, turning bbolt's errors and panics (and memory faults on
// a truncated file) into errCorrupt / errLocked.
func openBolt(path string, opts Options) (db *bolt.DB, err error) {
	var file *os.File
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			if file != nil {
				_ = file.Close() // release the flock; the mapping, if any, leaks
			}
			db, err = nil, fmt.Errorf("%w: %s: %v", errCorrupt, path, p)
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{
		Timeout:         opts.LockTimeout,
		FreelistType:    bolt.FreelistMapType,
		InitialMmapSize: opts.InitialMmapSize,
		NoSync:          opts.NoSync,
		OpenFile: func(name string, flag int, mode os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, mode)
			file = f
			return f, err
		},
	})
	switch {
	case err == nil:
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s", errLocked, path)
	case errors.As(err, new(*fs.PathError)):
		return nil, fmt.Errorf("raftlog: open %s: %w", path, err)
	default:
		return nil, fmt.Errorf("%w: %s: %v", errCorrupt, path, err)
	}
	// A truncated file still has valid meta pages but pages past its end would fault
	// when read: compare the high-water mark with the real size.
	st, err := os.Stat(path)
	if err == nil {
		err = db.View(func(tx *bolt.Tx) error {
			if tx.Size() > st.Size() {
				return fmt.Errorf("%w: %s: file is %d bytes, bbolt expects %d", errCorrupt, path, st.Size(), tx.Size())
			}
			return nil
		})
	}
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// load initialises a fresh file or reads an existing one into memory.
func (s *Storage) load() (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: %v", errCorrupt, s.path, p)
		}
	}()
	fresh := false
	if err := s.db.View(func(tx *bolt.Tx) error {
		k, _ := tx.Cursor().First()
		fresh = k == nil
		return nil
	}); err != nil {
		return s.corrupt("%v", err)
	}
	if fresh {
		// A bbolt file with no buckets at all is ours to initialise (new, or empty).
		if err := s.db.Update(func(tx *bolt.Tx) error {
			meta, err := tx.CreateBucket(bucketMeta)
			if err != nil {
				return err
			}
			if _, err := tx.CreateBucket(bucketLog); err != nil {
				return err
			}
			return meta.Put(keyMagic, magic)
		}); err != nil {
			return fmt.Errorf("%w: initialise %s: %v", errWrite, s.path, err)
		}
		s.snap = raftpb.EnsureSnapshot(nil)
		return nil
	}
	return s.db.View(s.read)
}

func (s *Storage) corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", errCorrupt, s.path, fmt.Sprintf(format, args...))
}

// read loads meta and the tail of the log, checking that they agree.
func (s *Storage) read(tx *bolt.Tx) error {
	meta, logb := tx.Bucket(bucketMeta), tx.Bucket(bucketLog)
	if meta == nil || logb == nil || !bytes.Equal(meta.Get(keyMagic), magic) {
		return s.corrupt("not a raftlog file (missing buckets or magic)")
	}
	if v := meta.Get(keyHardState); v != nil {
		s.hardState = &raftpb.HardState{}
		if err := proto.Unmarshal(v, s.hardState); err != nil {
			return s.corrupt("hardstate: %v", err)
		}
	}
	if v := meta.Get(keyConfState); v != nil {
		var err error
		if s.confState, s.confIndex, err = unmarshalConfState(v); err != nil {
			return s.corrupt("confstate: %v", err)
		}
	}
	s.snap = &raftpb.Snapshot{}
	if v := meta.Get(keySnapshot); v != nil {
		if err := proto.Unmarshal(v, s.snap); err != nil {
			return s.corrupt("snapshot: %v", err)
		}
	}
	s.snap = raftpb.EnsureSnapshot(s.snap)
	if v := meta.Get(keyCompacted); v != nil {
		if len(v) != 16 {
			return s.corrupt("compaction point has %d bytes", len(v))
		}
		s.dummyIndex, s.dummyTerm = binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:])
	}
	s.last = s.dummyIndex
	c := logb.Cursor()
	k, _ := c.First()
	if k == nil {
		return nil
	}
	if len(k) != 8 || binary.BigEndian.Uint64(k) != s.dummyIndex+1 {
		return s.corrupt("first entry key %x, want index %d", k, s.dummyIndex+1)
	}
	k, _ = c.Last()
	if len(k) != 8 {
		return s.corrupt("bad entry key %x", k)
	}
	s.last = binary.BigEndian.Uint64(k)
	if n := logb.Stats().KeyN; uint64(n) != s.last-s.dummyIndex {
		return s.corrupt("%d entries between %d and %d: a gap", n, s.dummyIndex+1, s.last)
	}
	n := min(uint64(s.cacheMax), s.last-s.dummyIndex)
	s.tail = make([]*raftpb.Entry, n)
	want := s.last
	for k, v := c.Last(); k != nil && n > 0; k, v = c.Prev() {
		e, err := decodeEntry(k, v, want)
		if err != nil {
			return s.corrupt("%v", err)
		}
		n--
		s.tail[n] = e
		want--
	}
	return nil
}

func key(i uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), i)
}

func compactedValue(index, term uint64) []byte {
	return binary.BigEndian.AppendUint64(key(index), term)
}

// decodeEntry decodes a stored entry, checking it sits under the right key. The value
// is copied by Unmarshal, so the result outlives the transaction.
func decodeEntry(k, v []byte, want uint64) (*raftpb.Entry, error) {
	if len(k) != 8 || binary.BigEndian.Uint64(k) != want {
		return nil, fmt.Errorf("entry key %x, want index %d", k, want)
	}
	e := &raftpb.Entry{}
	if err := proto.Unmarshal(v, e); err != nil {
		return nil, fmt.Errorf("entry %d: %v", want, err)
	}
	if e.GetIndex() != want {
		return nil, fmt.Errorf("entry under key %d has index %d", want, e.GetIndex())
	}
	return e, nil
}

// Close closes the file. It is idempotent; later calls to other methods return errClosed.
func (s *Storage) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.tail = nil
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("raftlog: close %s: %w", s.path, err)
	}
	return nil
}
