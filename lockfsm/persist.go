package lockfsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"runtime/debug"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Options tune Open.
type Options struct {
	// InitialMmapSize is passed to bbolt (bytes); 0 lets bbolt grow the map as needed.
	InitialMmapSize int
	// LockTimeout bounds the wait for the file lock held by another process; 0 means 1s.
	LockTimeout time.Duration
	// NoSync skips fsync on Commit. Unsafe (a crash can corrupt the file): for benchmarks only.
	NoSync bool
}

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
// damaged or not a lockfsm file returns an error that names it and wraps ErrCorrupt; bbolt panics and
// memory faults on such files are recovered and reported the same way.
func Open(path string, opts Options) (f *FSM, err error) {
	timeout := opts.LockTimeout
	if timeout == 0 {
		timeout = time.Second
	}
	var db *bolt.DB
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("lockfsm: open %s: %w: %v", path, ErrCorrupt, r)
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
		InitialMmapSize: opts.InitialMmapSize,
		NoSync:          opts.NoSync,
		FreelistType:    bolt.FreelistMapType,
	})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) || errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("lockfsm: open %s: %w", path, err)
		}
		return nil, fmt.Errorf("lockfsm: open %s: %w: %v", path, ErrCorrupt, err)
	}
	f = &FSM{path: path, db: db, dirtySessions: make(map[uint64]struct{}), dirtyLocks: make(map[string]struct{})}
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
		return fmt.Errorf("lockfsm: open %s: %w: %v", f.path, ErrCorrupt, err)
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
	sessions, locks := newState()
	var applied uint64
	err := f.db.View(func(tx *bolt.Tx) error {
		meta, sb, lb := tx.Bucket(bucketMeta), tx.Bucket(bucketSessions), tx.Bucket(bucketLocks)
		if meta == nil || sb == nil || lb == nil || string(meta.Get(keyMagic)) != string(fileMagic) {
			return fmt.Errorf("%w: not a lockfsm state file (missing buckets or magic)", ErrCorrupt)
		}
		a := meta.Get(keyApplied)
		if len(a) != 8 {
			return fmt.Errorf("%w: bad applied index", ErrCorrupt)
		}
		applied = binary.BigEndian.Uint64(a)
		if err := sb.ForEach(func(k, v []byte) error {
			if len(k) != 8 {
				return fmt.Errorf("%w: bad session key %x", ErrCorrupt, k)
			}
			s, err := decodeSession(binary.BigEndian.Uint64(k), v)
			if err != nil {
				return err
			}
			sessions[s.id] = s
			return nil
		}); err != nil {
			return err
		}
		return lb.ForEach(func(k, v []byte) error {
			l, err := decodeLock(string(k), v)
			if err != nil {
				return err
			}
			locks[l.name] = l
			return nil
		})
	})
	if err == nil {
		err = linkState(sessions, locks)
	}
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			err = fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		return fmt.Errorf("lockfsm: load %s: %w", f.path, err)
	}
	f.sessions, f.locks = sessions, locks
	f.applied, f.durable = applied, applied
	return nil
}

// Commit writes every record changed since the last Commit and the applied index in one bbolt write
// transaction (one fsync). After it returns nil, DurableIndex == AppliedIndex. On error nothing is marked
// clean, so a later Commit retries the same records; the node should treat a failing disk as fatal.
func (f *FSM) Commit() error {
	if f.db == nil {
		return fmt.Errorf("lockfsm: commit %s: closed", f.path)
	}
	applied := f.applied
	err := f.db.Update(func(tx *bolt.Tx) error {
		sb, lb := tx.Bucket(bucketSessions), tx.Bucket(bucketLocks)
		ids := make([]uint64, 0, len(f.dirtySessions))
		for id := range f.dirtySessions {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		// bbolt keeps references to keys and values until the transaction ends, so every key and value
		// gets its own bytes in the arena f.buf (a reallocation leaves earlier slices valid).
		f.buf = f.buf[:0]
		for _, id := range ids {
			key := f.arena(func(b []byte) []byte { return binary.BigEndian.AppendUint64(b, id) })
			var err error
			if s := f.sessions[id]; s != nil {
				err = sb.Put(key, f.arena(func(b []byte) []byte { return appendSession(b, s) }))
			} else {
				err = sb.Delete(key)
			}
			if err != nil {
				return err
			}
		}
		f.names = sortedKeys(f.names, f.dirtyLocks)
		for _, name := range f.names {
			key := f.arena(func(b []byte) []byte { return append(b, name...) })
			var err error
			if l := f.locks[name]; l != nil {
				err = lb.Put(key, f.arena(func(b []byte) []byte { return appendLock(b, l) }))
			} else {
				err = lb.Delete(key)
			}
			if err != nil {
				return err
			}
		}
		clear(f.names)
		return tx.Bucket(bucketMeta).Put(keyApplied, binary.BigEndian.AppendUint64(nil, applied))
	})
	if err != nil {
		return fmt.Errorf("lockfsm: commit %s: %w", f.path, err)
	}
	clear(f.dirtySessions)
	clear(f.dirtyLocks)
	f.durable = applied
	return nil
}

// arena appends with fn to f.buf and returns the appended bytes, capacity-clipped.
func (f *FSM) arena(fn func([]byte) []byte) []byte {
	start := len(f.buf)
	f.buf = fn(f.buf)
	return f.buf[start:len(f.buf):len(f.buf)]
}

// Close closes the file without committing (call Commit first to keep the tail; otherwise it is replayed
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
