package lockfsm

import (
	"encoding/binary"
	"fmt"
	"io"

	bolt "go.etcd.io/bbolt"
)

// A restore replaces the whole state with a snapshot's: read and verify it (ReadRestore), rewrite the
// state file with it (WriteRestore), then swap the in-memory table (InstallRestore). At a million names the
// reading and the writing each take seconds, so a member installing a leader's snapshot can do both at
// once: ReadRestoreTo hands the records on as it reads them, and WriteRestoreFrom puts them into the file
// inside one transaction that it commits only once the whole snapshot has been verified. The state file
// receives the snapshot's records as they are (records.go's formats; the file reads every version the
// snapshot may carry), so nothing is encoded twice.
//
// The in-memory table may be swapped in as soon as the snapshot is verified, while the file is still being
// written: memory is ahead of the file then, as it is between two commits, and the file catches up when the
// restore commits. A caller that does so must keep the snapshot itself durable until then (a node keeps the
// received file and restores from it again after a crash), and must stop if the write fails: memory then
// holds the snapshot's table and the file the old one.

// Restore replaces the whole state with the snapshot read from r. It reads and verifies all of r (format,
// records, checksum, consistency) before touching anything, then rewrites the bbolt file in one transaction
// and only then swaps the in-memory state; on any error the FSM is unchanged. Bad input wraps errCorrupt.
// It is ReadRestore, WriteRestore and InstallRestore in one call.
func (f *FSM) Restore(r io.Reader) error {
	rs, err := ReadRestore(r)
	if err != nil {
		return err
	}
	if err := f.WriteRestore(rs); err != nil {
		return err
	}
	f.InstallRestore(rs)
	return nil
}

// Restored is a snapshot read and verified by ReadRestore, for WriteRestore and InstallRestore.
type Restored struct {
	sessions map[uint64]*session
	locks    *lockTable
	records  []*RestoreRecords // the snapshot's records as read, for WriteRestore; nil from ReadRestoreTo
	applied  uint64
}

// Applied is the snapshot's applied index.
func (rs *Restored) Applied() uint64 { return rs.applied }

// RestoreRecords is a run of a snapshot's records, in the snapshot's order, copied out of the reader:
// what ReadRestoreTo hands on and WriteRestoreFrom puts into the state file. The state file keeps
// referring to its bytes until its transaction commits, so it must not be changed once handed on.
type RestoreRecords struct {
	buf   []byte       // keys and records back to back
	spans []recordSpan // one per record, in order
}

type recordSpan struct {
	lock     bool // a lock record (keyed by name), else a session's (keyed by its big-endian id)
	key, end int  // the key is buf[start:key], the record buf[key:end]; start is the previous span's end
}

// restoreBatch is how many records a RestoreRecords holds: enough that handing one on costs nothing next
// to its records, few enough that the writer starts soon after the reader.
const restoreBatch = 4096

// restoreTee copies the records readSnapshot reads into RestoreRecords and hands each full one to emit.
type restoreTee struct {
	cur  *RestoreRecords
	emit func(*RestoreRecords)
}

func (t *restoreTee) add(lock bool, key, rec []byte) {
	if t.cur == nil {
		t.cur = &RestoreRecords{buf: make([]byte, 0, restoreBatch*64), spans: make([]recordSpan, 0, restoreBatch)}
	}
	c := t.cur
	c.buf = append(c.buf, key...)
	k := len(c.buf)
	c.buf = append(c.buf, rec...)
	c.spans = append(c.spans, recordSpan{lock: lock, key: k, end: len(c.buf)})
	if len(c.spans) == restoreBatch {
		t.flush()
	}
}

func (t *restoreTee) session(id uint64, rec []byte) {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], id)
	t.add(false, k[:], rec)
}

func (t *restoreTee) flush() {
	if t.cur != nil && len(t.cur.spans) > 0 {
		t.emit(t.cur)
	}
	t.cur = nil
}

// ReadRestore reads and verifies a whole snapshot (format, records, checksum, consistency). It touches no
// FSM, so it may run on any goroutine. Bad input wraps errCorrupt. The result keeps a copy of the records
// for WriteRestore.
func ReadRestore(r io.Reader) (*Restored, error) {
	var records []*RestoreRecords
	rs, err := ReadRestoreTo(r, func(rr *RestoreRecords) { records = append(records, rr) })
	if err != nil {
		return nil, err
	}
	rs.records = records
	return rs, nil
}

// ReadRestoreTo is ReadRestore that hands the snapshot's records to emit as it reads them, in order,
// instead of keeping them: for a WriteRestoreFrom running at the same time. emit is called on the caller's
// goroutine and may block. Records handed on before an error are not yet verified: the error is what
// WriteRestoreFrom's verdict must return. The Restored it returns has no records of its own.
func ReadRestoreTo(r io.Reader, emit func(*RestoreRecords)) (*Restored, error) {
	t := newTableLoader()
	tee := &restoreTee{emit: emit}
	applied, err := readSnapshot(r, t, tee)
	if err != nil {
		return nil, fmt.Errorf("lockfsm: restore: %w", err)
	}
	tee.flush()
	sessions, locks, err := t.build()
	if err != nil {
		return nil, fmt.Errorf("lockfsm: restore: snapshot: %w", err)
	}
	return &Restored{sessions: sessions, locks: locks, applied: applied}, nil
}

// WriteRestore rewrites the bbolt file with rs's state in one transaction and then sets DurableIndex to
// rs.Applied(). rs must come from ReadRestore. The in-memory state is not touched (InstallRestore swaps it
// in), so the caller may run it on another goroutine while it reads the in-memory state; it must not Apply,
// commit or write a batch until InstallRestore. On error the file is unchanged.
func (f *FSM) WriteRestore(rs *Restored) error {
	i := 0
	return f.WriteRestoreFrom(func() (*RestoreRecords, bool) {
		if i == len(rs.records) {
			return nil, false
		}
		i++
		return rs.records[i-1], true
	}, func() (*Restored, error) { return rs, nil })
}

// WriteRestoreFrom rewrites the bbolt file with a snapshot's records in one transaction: it puts each run
// next returns, in order, until next reports the end; then it asks verdict for the snapshot as read and
// verified, and commits only if verdict returns one without error (that error is returned, and the file is
// left unchanged). Whatever happens, it calls next until the end and verdict once, so a producer that
// blocks on handing records on is never left blocked. Then it sets DurableIndex to the snapshot's Applied.
// The same rules as WriteRestore's apply to the in-memory state until InstallRestore, with one exception:
// InstallRestore of the verified snapshot may run (on the goroutine that owns the FSM) while this one is
// still writing it, once the snapshot is verified, and Apply after it (nothing may be committed or
// prepared for commit until this returns). DurableIndex stays at the file's old index until the commit.
func (f *FSM) WriteRestoreFrom(next func() (*RestoreRecords, bool), verdict func() (*Restored, error)) error {
	var rs *Restored
	var verr error
	asked := false
	finish := func(drain bool) {
		for ok := drain; ok; _, ok = next() {
		}
		asked = true
		rs, verr = verdict()
	}
	var err error
	if f.db == nil {
		err = fmt.Errorf("lockfsm: restore %s: closed", f.path)
	} else {
		f.restoreHalves.Store(2) // this commit and InstallRestore: until both, the file's table is not memory's
		err = f.db.Update(func(tx *bolt.Tx) error {
			err := putRestoreRecords(tx, next) // reads to the end unless it fails
			finish(err != nil)
			switch {
			case verr != nil:
				return verr
			case err != nil:
				return fmt.Errorf("lockfsm: restore %s: %w", f.path, err)
			}
			return tx.Bucket(bucketMeta).Put(keyApplied, binary.BigEndian.AppendUint64(nil, rs.applied))
		})
	}
	if !asked {
		finish(true)
	}
	if verr == nil && err == nil {
		f.durable.Store(rs.applied)
		f.restoreHalf()
		return nil
	}
	if f.db != nil {
		f.restoreHalves.CompareAndSwap(2, 0) // not installed: memory and the file are as they were
	}
	if verr != nil {
		return verr
	}
	return err
}

// restoreHalf counts down one of a restore's commit and install; the file is memory's table again once
// both are done.
func (f *FSM) restoreHalf() {
	if f.restoreHalves.Add(-1) < 0 {
		f.restoreHalves.Store(0) // an install without a restore write (tests)
	}
}

// restoring reports whether a restore is replacing the file, so that the file is not memory's table.
func (f *FSM) restoring() bool { return f.restoreHalves.Load() > 0 }

// putRestoreRecords replaces the sessions and locks buckets with the records next returns, until the end
// or the first error.
func putRestoreRecords(tx *bolt.Tx, next func() (*RestoreRecords, bool)) error {
	for _, name := range [][]byte{bucketSessions, bucketLocks} {
		if err := tx.DeleteBucket(name); err != nil {
			return err
		}
	}
	sb, err := tx.CreateBucket(bucketSessions)
	if err != nil {
		return err
	}
	lb, err := tx.CreateBucket(bucketLocks)
	if err != nil {
		return err
	}
	// The snapshot lists records in key order: bbolt then fills pages one after another instead of
	// splitting them all over the tree (BenchmarkRestore, 50,000 locks: 4.0 s in map order, 0.3 s in key
	// order), and the file's layout does not depend on map order.
	lb.FillPercent = restoreFillPercent
	for rr, ok := next(); ok; rr, ok = next() {
		start := 0
		for _, sp := range rr.spans {
			b := sb
			if sp.lock {
				b = lb
			}
			if err := b.Put(rr.buf[start:sp.key:sp.key], rr.buf[sp.key:sp.end:sp.end]); err != nil {
				return err
			}
			start = sp.end
		}
	}
	return nil
}

// InstallRestore replaces the in-memory state with rs's, once WriteRestore returned nil for it, or once
// WriteRestoreFrom's verdict has it verified (see there). Records changed since the last commit are
// dropped: the snapshot supersedes them.
func (f *FSM) InstallRestore(rs *Restored) {
	f.sessions, f.locks = rs.sessions, rs.locks
	rs.records = nil
	f.countAll()
	f.unwritten = nil
	f.restoreHalf()
	f.applied = rs.applied
	f.dirtySessions = emptied(f.dirtySessions)
	f.dirtyLocks = emptied(f.dirtyLocks)
	f.fresh = emptied(f.fresh)
}

// restoreFillPercent fills the pages of a restored table's bucket: names arrive in key order, so pages
// filled at bbolt's default (half) leave the file twice the size it need be; a little room is left for
// the records that grow as the table changes.
const restoreFillPercent = 0.9
