package lockfsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Options tune Open.
type Options struct {
	// InitialMmapSize is the address space bbolt maps the file into at first (bytes); 0 means
	// defaultMmapSize. It costs address space, not memory: pages are read in as they are touched. A file
	// that outgrows its map is remapped inside the commit that grows it, which waits for readers (a
	// snapshot being streamed) and copies out every record the commit holds — for a restored snapshot
	// that is the whole table, once per doubling — so the default is sized to never remap a table of
	// several million names, as etcd maps its backend.
	InitialMmapSize int
	// LockTimeout bounds the wait for the file lock held by another process; 0 means 1s.
	LockTimeout time.Duration
	// NoSync skips fsync on commit. Unsafe (a crash can corrupt the file): for benchmarks only.
	NoSync bool

	knobs knobs // bugs to plant in the FSM (knobs.go): set only by lockfsm's tests and Plant
}

// defaultMmapSize is the map Open asks bbolt for when Options.InitialMmapSize is 0: a state file of a
// million held locks is about 140 MiB (docs/benchmarks.md), so this holds several million. On a 32-bit
// platform, whose address space a gigabyte would crowd, it is 0 (bbolt grows the map as needed).
const defaultMmapSize = (1 << 30) * (strconv.IntSize / 64)

// Bucket and key names inside the bbolt file.
var (
	bucketMeta     = []byte("lockfsm")
	bucketSessions = []byte("sessions")
	bucketLocks    = []byte("locks")
	keyMagic       = []byte("magic")
	keyApplied     = []byte("applied")
	fileMagic      = []byte("lockraft/lockfsm v1")
)

// Open opens or creates the state file at path and loads it: the state as of DurableIndex. A file that is
// damaged or not a lockfsm file returns an error that names it and wraps errCorrupt; bbolt panics and
// memory faults on such files are recovered and reported the same way.
func Open(path string, opts Options) (f *FSM, err error) {
	timeout := opts.LockTimeout
	if timeout == 0 {
		timeout = time.Second
	}
	mmapSize := opts.InitialMmapSize
	if mmapSize == 0 {
		mmapSize = defaultMmapSize
	}
	var db *bolt.DB
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("lockfsm: open %s: %w: %v", path, errCorrupt, r)
			f = nil
		}
		if err != nil && db != nil {
			closeQuietly(db)
		}
	}()
	// bbolt maps the file; on a truncated file a read past its end faults. Turn that into a panic we recover.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	db, err = bolt.Open(path, 0o600, &bolt.Options{
		Timeout:         timeout,
		InitialMmapSize: mmapSize,
		NoSync:          opts.NoSync,
		FreelistType:    bolt.FreelistMapType,
	})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) || errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("lockfsm: open %s: %w", path, err)
		}
		return nil, fmt.Errorf("lockfsm: open %s: %w: %v", path, errCorrupt, err)
	}
	f = &FSM{path: path, db: db, dirtySessions: make(map[uint64]struct{}), dirtyLocks: make(map[string]struct{}),
		k: opts.knobs}
	if err := f.initFile(); err != nil {
		return nil, err
	}
	if err := f.load(); err != nil {
		return nil, err
	}
	return f, nil
}

func closeQuietly(db *bolt.DB) {
	defer func() { _ = recover() }()
	_ = db.Close()
}

// initFile creates the buckets of an empty file, or checks that a non-empty one is ours.
func (f *FSM) initFile() error {
	empty := true
	if err := f.db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
	}); err != nil {
		return fmt.Errorf("lockfsm: open %s: %w: %v", f.path, errCorrupt, err)
	}
	if !empty {
		return nil
	}
	return f.db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if err := meta.Put(keyMagic, fileMagic); err != nil {
			return err
		}
		if err := meta.Put(keyApplied, binary.BigEndian.AppendUint64(nil, 0)); err != nil {
			return err
		}
		if _, err := tx.CreateBucket(bucketSessions); err != nil {
			return err
		}
		_, err = tx.CreateBucket(bucketLocks)
		return err
	})
}

func (f *FSM) load() error {
	t := newTableLoader()
	var applied uint64
	err := f.db.View(func(tx *bolt.Tx) error {
		meta, sb, lb := tx.Bucket(bucketMeta), tx.Bucket(bucketSessions), tx.Bucket(bucketLocks)
		if meta == nil || sb == nil || lb == nil || string(meta.Get(keyMagic)) != string(fileMagic) {
			return fmt.Errorf("%w: not a lockfsm state file (missing buckets or magic)", errCorrupt)
		}
		a := meta.Get(keyApplied)
		if len(a) != 8 {
			return fmt.Errorf("%w: bad applied index", errCorrupt)
		}
		applied = binary.BigEndian.Uint64(a)
		if err := sb.ForEach(func(k, v []byte) error {
			if len(k) != 8 {
				return fmt.Errorf("%w: bad session key %x", errCorrupt, k)
			}
			s, err := decodeSession(binary.BigEndian.Uint64(k), v)
			if err != nil {
				return err
			}
			t.sessions[s.id] = s
			return nil
		}); err != nil {
			return err
		}
		return lb.ForEach(func(k, v []byte) error { return t.lock(string(k), v, 0) })
	})
	var sessions map[uint64]*session
	var locks *lockTable
	if err == nil {
		sessions, locks, err = t.build()
	}
	if err != nil {
		if !errors.Is(err, errCorrupt) {
			err = fmt.Errorf("%w: %v", errCorrupt, err)
		}
		return fmt.Errorf("lockfsm: load %s: %w", f.path, err)
	}
	f.sessions, f.locks = sessions, locks
	f.countAll()
	f.applied = applied
	f.durable.Store(applied)
	return nil
}

// commit writes every record changed since the last commit and the applied index in one bbolt write
// transaction (one fsync). After it returns nil, DurableIndex == AppliedIndex. On error nothing is marked
// clean, so a later commit retries the same records; the node should treat a failing disk as fatal.
func (f *FSM) commit() error {
	if f.db == nil {
		return fmt.Errorf("lockfsm: commit %s: closed", f.path)
	}
	b := f.prepare(&f.buf)
	if err := f.write(b); err != nil {
		return err
	}
	f.settleCounts()
	f.dirtySessions = emptied(f.dirtySessions)
	f.dirtyLocks = emptied(f.dirtyLocks)
	f.fresh = emptied(f.fresh)
	return nil
}

// A CommitBatch is the lock table's changed records, encoded by PrepareCommit, for WriteCommit to write
// while the state machine goes on applying entries.
type CommitBatch struct {
	applied  uint64
	sessions []kv
	locks    []kv
	buf      []byte // the arena the keys and values point into
}

type kv struct{ k, v []byte } // v == nil: delete

// Applied is the index the batch makes durable.
func (b *CommitBatch) Applied() uint64 { return b.applied }

// PrepareCommit encodes every record changed since the last PrepareCommit or commit, and the applied
// index, into a batch and marks them clean. It does no I/O; WriteCommit writes the batch, from any
// goroutine, while Apply goes on. Batches must be written in the order they were prepared, one at a
// time, and neither commit, Restore nor Close may run while one is being written. If WriteCommit fails
// the records stay unwritten (a later batch does not contain them): the node must stop, as after any
// failed commit, and replay from the raft log after a restart.
func (f *FSM) PrepareCommit() *CommitBatch {
	b := f.prepare(nil)
	durable := f.durable.Load()
	f.unwritten = slices.DeleteFunc(f.unwritten, func(b *CommitBatch) bool { return b.applied <= durable })
	if len(b.locks) > 0 {
		f.unwritten = append(f.unwritten, b)
	}
	f.settleCounts()
	f.dirtySessions = emptied(f.dirtySessions)
	f.dirtyLocks = emptied(f.dirtyLocks)
	f.fresh = emptied(f.fresh)
	return b
}

// maxKeptDirty is the size above which a dirty set is replaced rather than cleared once committed.
const maxKeptDirty = 8192

// emptied returns m emptied. A map keeps the room it grew to, and ranging over it costs that room, not
// its length: after one entry dirtied a million names (a session's end), every later commit would
// range over a million empty slots twice (15 ms each at that size), so a set that grew large is
// replaced.
func emptied[K comparable](m map[K]struct{}) map[K]struct{} {
	if len(m) > maxKeptDirty {
		return make(map[K]struct{})
	}
	clear(m)
	return m
}

// WriteCommit writes a batch from PrepareCommit in one bbolt write transaction (one fsync). After it
// returns nil, DurableIndex is the batch's applied index. DurableIndex may be read concurrently.
func (f *FSM) WriteCommit(b *CommitBatch) error {
	if f.db == nil {
		return fmt.Errorf("lockfsm: commit %s: closed", f.path)
	}
	return f.write(b)
}

// prepare encodes the dirty records into a batch whose arena is *arena (reused) or a new one.
func (f *FSM) prepare(arena *[]byte) *CommitBatch {
	b := &CommitBatch{applied: f.applied}
	if arena != nil {
		b.buf = (*arena)[:0]
	}
	// bbolt keeps references to keys and values until the transaction ends, so every key and value
	// gets its own bytes in the arena (a reallocation leaves earlier slices valid).
	put := func(fn func([]byte) []byte) []byte {
		start := len(b.buf)
		b.buf = fn(b.buf)
		return b.buf[start:len(b.buf):len(b.buf)]
	}
	ids := make([]uint64, 0, len(f.dirtySessions))
	for id := range f.dirtySessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		x := kv{k: put(func(buf []byte) []byte { return binary.BigEndian.AppendUint64(buf, id) })}
		if s := f.sessions[id]; s != nil {
			x.v = put(func(buf []byte) []byte { return appendSession(buf, s) })
		}
		b.sessions = append(b.sessions, x)
	}
	f.names = sortedKeys(f.names, f.dirtyLocks)
	for _, name := range f.names {
		x := kv{k: put(func(buf []byte) []byte { return append(buf, name...) })}
		if l := f.locks.get(name); l != nil {
			x.v = put(func(buf []byte) []byte { return appendFileLock(buf, l, &f.k) })
		}
		b.locks = append(b.locks, x)
	}
	clear(f.names)
	if arena != nil {
		*arena = b.buf
	}
	return b
}

func (f *FSM) write(b *CommitBatch) error {
	return f.update("commit", b.applied, func(tx *bolt.Tx) error {
		for _, x := range [2]struct {
			bucket []byte
			kvs    []kv
		}{{bucketSessions, b.sessions}, {bucketLocks, b.locks}} {
			bk := tx.Bucket(x.bucket)
			for _, e := range x.kvs {
				var err error
				if e.v != nil {
					err = bk.Put(e.k, e.v)
				} else {
					err = bk.Delete(e.k)
				}
				if err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// update runs fill in one bbolt transaction that also records applied as the file's applied index and,
// once it is committed, makes applied the durable index. op names the operation in the error.
func (f *FSM) update(op string, applied uint64, fill func(tx *bolt.Tx) error) error {
	err := f.db.Update(func(tx *bolt.Tx) error {
		if err := fill(tx); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keyApplied, binary.BigEndian.AppendUint64(nil, applied))
	})
	if err != nil {
		return fmt.Errorf("lockfsm: %s %s: %w", op, f.path, err)
	}
	f.durable.Store(applied)
	return nil
}

// Close closes the file without committing (call commit first to keep the tail; otherwise it is replayed
// from the log after Open). Safe to call more than once.
func (f *FSM) Close() error {
	if f.db == nil {
		return nil
	}
	db := f.db
	f.db = nil
	if err := db.Close(); err != nil {
		return fmt.Errorf("lockfsm: close %s: %w", f.path, err)
	}
	return nil
}
