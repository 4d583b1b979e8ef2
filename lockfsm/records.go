package lockfsm

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Record encodings shared by the bbolt file and snapshots. Each record starts with its format version;
// integers are uvarints, strings are uvarint length + bytes. The session and waiter sets a session keeps
// in memory (holds, waits) are derived from the lock records on load. Session and lock records have
// their own versions.
//
// Lock records: version 2 added the lock's grantSeq (after its token).
const lockRecordVersion = 2

// Session records: version 2 is node, ttl, lowWater and the retained results; version 3 adds the
// checkpoint mark (ckpt) at the end. Version 2 records still decode (as live sessions); new ones are
// always written as version 3.
const (
	sessionRecordV2      = 2
	sessionRecordVersion = 3
)

func appendString(b []byte, s string) []byte {
	b = protowire.AppendVarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendSession encodes s (without its id, which is the key).
func appendSession(b []byte, s *session) []byte {
	b = append(b, sessionRecordVersion)
	b = protowire.AppendVarint(b, s.node)
	b = protowire.AppendVarint(b, s.ttl)
	b = protowire.AppendVarint(b, s.lowWater)
	b = protowire.AppendVarint(b, uint64(len(s.results)))
	for i := range s.results {
		r := &s.results[i]
		b = protowire.AppendVarint(b, r.seq)
		b = append(b, r.code, byte(r.status))
		b = protowire.AppendVarint(b, r.token)
		b = protowire.AppendVarint(b, uint64(r.holdCount))
		b = protowire.AppendVarint(b, uint64(r.position))
		b = protowire.AppendVarint(b, r.holder.Session)
		b = appendString(b, r.holder.Owner)
	}
	return protowire.AppendVarint(b, s.ckpt)
}

// appendLock encodes l (without its name, which is the key).
func appendLock(b []byte, l *lock) []byte {
	b = append(b, lockRecordVersion)
	var flags byte
	if l.delayed {
		flags |= 1
	}
	b = append(b, flags)
	b = protowire.AppendVarint(b, l.holder.Session)
	b = appendString(b, l.holder.Owner)
	b = protowire.AppendVarint(b, uint64(l.holdCount))
	b = protowire.AppendVarint(b, l.token)
	b = protowire.AppendVarint(b, l.grantSeq)
	b = protowire.AppendVarint(b, l.lease)
	b = protowire.AppendVarint(b, l.delayToken)
	b = protowire.AppendVarint(b, uint64(len(l.waiters)))
	for i := range l.waiters {
		w := &l.waiters[i]
		b = protowire.AppendVarint(b, w.session)
		b = appendString(b, w.owner)
		b = protowire.AppendVarint(b, w.seq)
		b = protowire.AppendVarint(b, w.enqueued)
		b = protowire.AppendVarint(b, w.lease)
	}
	return b
}

func (d *decoder) byte1() byte {
	if d.bad || len(d.b) == 0 {
		d.bad = true
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) u32() uint32 {
	v := d.uvarint()
	if v > 1<<32-1 {
		d.bad = true
	}
	return uint32(v)
}

// count reads a element count, rejecting counts the remaining bytes cannot hold (minBytes each).
func (d *decoder) count(minBytes int) int {
	n := d.uvarint()
	if n > uint64(len(d.b)/minBytes) {
		d.bad = true
		return 0
	}
	return int(n)
}

func decodeSession(id uint64, b []byte) (*session, error) {
	d := decoder{b: b}
	v := d.byte1()
	if v != sessionRecordV2 && v != sessionRecordVersion {
		return nil, fmt.Errorf("%w: session %d: unknown record version", ErrCorrupt, id)
	}
	s := &session{id: id, node: d.uvarint(), ttl: d.uvarint(), lowWater: d.uvarint()}
	n := d.count(8)
	if n > MaxRetainedResults {
		d.bad = true
	}
	if n > 0 && !d.bad {
		s.results = make([]retained, n)
	}
	for i := 0; i < n && !d.bad; i++ {
		r := &s.results[i]
		r.seq = d.uvarint()
		r.code = d.byte1()
		r.status = Status(d.byte1())
		r.token = d.uvarint()
		r.holdCount = d.u32()
		r.position = d.u32()
		r.holder.Session = d.uvarint()
		r.holder.Owner = d.str()
		if _, ok := codeToErr(r.code); !ok || r.status >= statusEnd || r.seq < s.lowWater ||
			(i > 0 && r.seq <= s.results[i-1].seq) {
			d.bad = true
		}
	}
	if v >= sessionRecordVersion {
		s.ckpt = d.uvarint()
		if s.ckpt == 1<<64-1 {
			d.bad = true
		}
	}
	if d.bad || len(d.b) != 0 {
		return nil, fmt.Errorf("%w: session %d: bad record", ErrCorrupt, id)
	}
	return s, nil
}

func decodeLock(name string, b []byte) (*lock, error) {
	d := decoder{b: b}
	if d.byte1() != lockRecordVersion {
		return nil, fmt.Errorf("%w: lock %q: unknown record version", ErrCorrupt, name)
	}
	l := &lock{name: name}
	flags := d.byte1()
	l.delayed = flags&1 != 0
	l.holder.Session = d.uvarint()
	l.holder.Owner = d.str()
	l.holdCount = d.u32()
	l.token = d.uvarint()
	l.grantSeq = d.uvarint()
	l.lease = d.uvarint()
	l.delayToken = d.uvarint()
	n := d.count(5)
	if n > 0 && !d.bad {
		l.waiters = make([]waiter, n)
	}
	for i := 0; i < n && !d.bad; i++ {
		w := &l.waiters[i]
		w.session = d.uvarint()
		w.owner = d.str()
		w.seq = d.uvarint()
		w.enqueued = d.uvarint()
		w.lease = d.uvarint()
	}
	if d.bad || len(d.b) != 0 || flags&^1 != 0 || !validName(name) ||
		(l.held() != (l.holdCount > 0)) || (l.held() && l.delayed) ||
		(!l.held() && !l.delayed && len(l.waiters) == 0) || (!l.held() && !l.delayed) ||
		(!l.held() && l.grantSeq != 0) {
		return nil, fmt.Errorf("%w: lock %q: bad record", ErrCorrupt, name)
	}
	return l, nil
}

// linkState rebuilds each session's holds and waits from the lock table and checks that every holder and
// waiter belongs to an open session.
func linkState(sessions map[uint64]*session, locks map[string]*lock) error {
	for _, l := range locks {
		if l.held() {
			s := sessions[l.holder.Session]
			if s == nil {
				return fmt.Errorf("%w: lock %q held by unknown session %d", ErrCorrupt, l.name, l.holder.Session)
			}
			s.addHold(l.name)
		}
		for _, w := range l.waiters {
			s := sessions[w.session]
			if s == nil {
				return fmt.Errorf("%w: lock %q has a waiter of unknown session %d", ErrCorrupt, l.name, w.session)
			}
			s.addWait(l.name)
		}
	}
	return nil
}
