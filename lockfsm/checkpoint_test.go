package lockfsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/encoding/protowire"
)

// TestCheckpointRoundTrip (S7, L3): a checkpoint's marks survive encoding, including a zero silence (not
// the same as live) and a large one; malformed mark lists are errBadCommand, never a panic.
func TestCheckpointRoundTrip(t *testing.T) {
	c := Command{Kind: KindCheckpoint, Token: 7, Seq: 3, Checkpoints: []Checkpoint{
		{Session: 5, SilenceMillis: 1500}, {Session: 9, Live: true}, {Session: 1 << 40, SilenceMillis: 0},
		{Session: 2, SilenceMillis: 1<<63 - 1}}}
	b := c.AppendEncode(nil)
	got, err := DecodeCommand(b)
	if err != nil || got.Version != 2 {
		t.Fatalf("round trip: %v, version %d (a checkpoint exists only in version 2)", err, got.Version)
	}
	got.Version = 0
	if !commandsEqual(c, got) {
		t.Fatalf("round trip:\n%+v\n%+v", c, got)
	}
	// version, kind, mask with only the Checkpoints bit, then the list.
	head := protowire.AppendVarint([]byte{commandVersion, byte(KindCheckpoint)}, fCheckpoints)
	for name, g := range map[string][]byte{
		"empty list":        protowire.AppendVarint(bytes.Clone(head), 0),
		"session 0":         append(protowire.AppendVarint(bytes.Clone(head), 1), 0, 1),
		"truncated":         append(protowire.AppendVarint(bytes.Clone(head), 2), 5, 1),
		"count beyond data": append(protowire.AppendVarint(bytes.Clone(head), 1<<20), 5, 1),
		"silence overflow":  protowire.AppendVarint(append(protowire.AppendVarint(bytes.Clone(head), 1), 5), 1<<64-1),
		"trailing byte":     append(bytes.Clone(b), 0),
	} {
		if _, err := DecodeCommand(g); !errors.Is(err, errBadCommand) {
			t.Errorf("%s (%x): want ErrBadCommand, got %v", name, g, err)
		}
	}
}

// TestCheckpointApply (S7): marks change only the sessions' marks, never a lock, deterministically; they
// are kept by commit, a reopen and a snapshot; unknown sessions are ignored.
func TestCheckpointApply(t *testing.T) {
	f := openTemp(t, "ck.db")
	f.ApplyCommand(1, &Command{Kind: KindOpenSession, Node: 1, TTLMillis: 1000}, nil)
	f.ApplyCommand(2, &Command{Kind: KindOpenSession, Node: 2, TTLMillis: 1000}, nil)
	f.ApplyCommand(3, &Command{Kind: KindAcquire, Session: 1, Seq: 1, Name: "x", Owner: "a"}, nil)
	locks := f.Locks()
	r, ev := f.ApplyCommand(4, &Command{Kind: KindCheckpoint, Checkpoints: []Checkpoint{
		{Session: 1, SilenceMillis: 800}, {Session: 2, SilenceMillis: 0}, {Session: 77, SilenceMillis: 5}}}, nil)
	if r.Err != nil || r.Status != Noop || len(ev) != 0 {
		t.Fatalf("checkpoint: %+v %v", r, ev)
	}
	ss := f.Sessions()
	if len(ss) != 2 || !ss[0].Silent || ss[0].SilenceMillis != 800 || !ss[1].Silent || ss[1].SilenceMillis != 0 {
		t.Fatalf("sessions after checkpoint: %+v", ss)
	}
	if got := f.Locks(); len(got) != len(locks) || got[0].Token != locks[0].Token {
		t.Fatalf("a checkpoint changed the lock table: %+v", got)
	}
	f.ApplyCommand(5, &Command{Kind: KindCheckpoint, Checkpoints: []Checkpoint{{Session: 2, Live: true}}}, nil)
	if err := f.commit(); err != nil {
		t.Fatal(err)
	}
	snap := snapshotBytes(t, f)
	path := f.path
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g := mustOpen(t, path, Options{})
	defer g.Close()
	ss = g.Sessions()
	if !ss[0].Silent || ss[0].SilenceMillis != 800 || ss[1].Silent {
		t.Fatalf("sessions after reopen: %+v", ss)
	}
	if !bytes.Equal(snap, snapshotBytes(t, g)) {
		t.Fatal("reopened state differs from the state before")
	}
	h := openTemp(t, "restored.db")
	if err := h.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if ss := h.Sessions(); !ss[0].Silent || ss[0].SilenceMillis != 800 || ss[1].Silent {
		t.Fatalf("sessions after restore: %+v", ss)
	}
}

// appendSessionV2 is the session record encoder of record version 2 (before checkpoint marks), kept to
// write old-format records in tests.
func appendSessionV2(b []byte, s *session) []byte {
	return appendSessionFields(append(b, sessionRecordV2), s)
}

// oldFormatState builds a small table whose session records are rewritten in record version 2.
func oldFormatState(t *testing.T) *FSM {
	f := openTemp(t, "old.db")
	f.ApplyCommand(1, &Command{Kind: KindOpenSession, Node: 1, TTLMillis: 1000}, nil)
	f.ApplyCommand(2, &Command{Kind: KindOpenSession, Node: 2, TTLMillis: 2000}, nil)
	f.ApplyCommand(3, &Command{Kind: KindAcquire, Session: 1, Seq: 1, Name: "x", Owner: "a"}, nil)
	f.ApplyCommand(4, &Command{Kind: KindAcquire, Session: 2, Seq: 1, Name: "x", Owner: "b", Wait: true}, nil)
	if err := f.commit(); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestOldSessionRecordsStillLoad (S3, S7): a state file and a snapshot written before checkpoint marks
// (session record version 2) still open and restore, as live sessions, and give the same table as the
// current format; unknown record versions are errCorrupt.
func TestOldSessionRecordsStillLoad(t *testing.T) {
	f := oldFormatState(t)
	want := snapshotBytes(t, f)

	// The state file: rewrite every session record as version 2, reopen.
	err := f.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSessions)
		for id, s := range f.sessions {
			if err := b.Put(binary.BigEndian.AppendUint64(nil, id), appendSessionV2(nil, s)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	path := f.path
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("open a state file with version-2 session records: %v", err)
	}
	defer g.Close()
	if got := snapshotBytes(t, g); !bytes.Equal(got, want) {
		t.Fatal("version-2 session records load into a different table")
	}
	for _, s := range g.Sessions() {
		if s.Silent {
			t.Fatalf("an old session record loaded as checkpointed: %+v", s)
		}
	}

	// A snapshot in the old format: the same stream with version-2 session records.
	old := oldSnapshot(t, g)
	h := openTemp(t, "restored.db")
	if err := h.Restore(bytes.NewReader(old)); err != nil {
		t.Fatalf("restore a snapshot with version-2 session records: %v", err)
	}
	if got := snapshotBytes(t, h); !bytes.Equal(got, want) {
		t.Fatal("an old-format snapshot restores into a different table")
	}

	for _, v := range []byte{1, 4, 0xff} {
		rec := appendSession(nil, g.sessions[1])
		rec[0] = v
		if _, err := decodeSession(1, rec); !errors.Is(err, errCorrupt) {
			t.Errorf("session record version %d: want ErrCorrupt, got %v", v, err)
		}
	}
}

// oldSnapshot writes f's state in the snapshot format with version-2 session records.
func oldSnapshot(t *testing.T, f *FSM) []byte {
	var b []byte
	b = append(b, snapMagic...)
	b = append(b, snapVersion)
	b = protowire.AppendVarint(b, f.applied)
	for _, s := range f.Sessions() {
		rec := appendSessionV2(nil, f.sessions[s.Session])
		b = append(b, tagSession)
		b = protowire.AppendVarint(b, s.Session)
		b = protowire.AppendVarint(b, uint64(len(rec)))
		b = append(b, rec...)
	}
	for _, name := range f.locks.sortedNames(nil) {
		rec := appendLock(nil, f.locks.get(name), &f.k)
		b = append(b, tagLock)
		b = appendString(b, name)
		b = protowire.AppendVarint(b, uint64(len(rec)))
		b = append(b, rec...)
	}
	b = append(b, tagEnd)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// TestOldEntriesStillDecode (S7): commands encoded before KindCheckpoint existed decode to the same
// command (their bytes are unchanged by the new kind and field bit, which exist only in version 2).
func TestOldEntriesStillDecode(t *testing.T) {
	// An acquire as version 1 wrote it before this change: version, kind 5, mask (session, seq, name,
	// owner, wait), then the fields.
	old := []byte{1, 5, 0x3b, 0x07, 0x02, 0x01, 0x61, 0x01, 0x62}
	c, err := DecodeCommand(old)
	if err != nil {
		t.Fatal(err)
	}
	want := Command{Kind: KindAcquire, Session: 7, Seq: 2, Name: "a", Owner: "b", Wait: true, Version: 1}
	if !commandsEqual(c, want) {
		t.Fatalf("old acquire decodes as %+v", c)
	}
	if !bytes.Equal(want.AppendEncode(nil), old) {
		t.Fatal("the encoding of an old command changed")
	}
}
