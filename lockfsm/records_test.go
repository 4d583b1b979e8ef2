package lockfsm

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// FuzzLockRecord: a damaged lock record (bbolt file or snapshot) is refused with errCorrupt, never a
// panic; one that decodes is canonical: encoding it again and decoding that gives the same bytes.
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
	})
}
