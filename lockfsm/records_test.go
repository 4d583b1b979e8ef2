package lockfsm

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// FuzzLockRecord: a damaged lock record (bbolt file or snapshot) is refused with errCorrupt, never a
// panic; one that decodes is canonical: encoding it again and decoding that gives the same bytes, and so
// does the state file's encoding of it (S7: a restart reads back what was committed).
func FuzzLockRecord(f *testing.F) {
	// Seeds: every record of a few random catalogue streams, and the old version's records.
	r := rand.New(rand.NewPCG(7, 8))
	for range 6 {
		b := make([]byte, 900)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		m := memFSM()
		genApply(b, m, nil)
		for l := range m.locks.all() {
			f.Add(l.name, appendLock(nil, l, &knobs{}))
		}
	}
	f.Add("a", []byte{lockRecordV2, 1, 0, 0, 0, 5, 0, 0, 9, 0})
	// Mutexes at the edge of what a version-2 record holds: a leased hold with a queue, a multi-name hold
	// and a multi-name waiter (which it does not hold).
	w := waiter{session: 3, owner: "w", seq: 4, enqueued: 9, lease: 700}
	h := hold{session: 1, owner: "o", count: 2, token: 5, grantSeq: 3, lease: 500}
	for _, x := range []*extra{nil, {names: []string{"a", "b"}}} {
		l := &lock{name: "a"}
		l.addHold(hold{session: h.session, owner: h.owner, count: h.count, token: h.token, grantSeq: h.grantSeq,
			lease: h.lease, x: x})
		l.setWaiters([]waiter{w})
		f.Add(l.name, appendLock(nil, l, &knobs{}))
		l = &lock{name: "a"}
		l.addHold(h)
		mw := w
		mw.x = x
		l.setWaiters([]waiter{mw})
		f.Add(l.name, appendLock(nil, l, &knobs{}))
	}
	f.Fuzz(func(t *testing.T, name string, rec []byte) {
		l, err := decodeLock(name, rec, 0)
		if err != nil {
			return
		}
		again := appendLock(nil, l, &knobs{})
		l2, err := decodeLock(name, again, lockRecordVersion)
		if err != nil {
			t.Fatalf("re-decode of %x: %v", again, err)
		}
		if !bytes.Equal(again, appendLock(nil, l2, &knobs{})) {
			t.Fatalf("not canonical: %x", again)
		}
		// The state file's encoding (version 2 where it fits) reads back as the same lock.
		file := appendFileLock(nil, l, &knobs{})
		l3, err := decodeLock(name, file, 0)
		if err != nil {
			t.Fatalf("decode of the file's record %x: %v", file, err)
		}
		if got := appendLock(nil, l3, &knobs{}); !bytes.Equal(got, again) {
			t.Fatalf("the file's record %x reads back as %x, want %x", file, got, again)
		}
	})
}
