package lockfsm

// tableLoader builds the in-memory table from records read in key order: the state file's when a member
// opens it (Open), a snapshot's when it installs one (Restore). Both happen with the whole table at once
// — a million names on every restart and every snapshot a new member takes — so the loader builds at the
// final size instead of growing: it collects the locks first and then makes each map once with its size
// known, and it keeps one copy of each owner string (a fleet's holders repeat a few owners over many names).
type tableLoader struct {
	sessions map[uint64]*session
	locks    []*lock // in key order
	owners   map[string]string
}

// maxInternedOwners bounds the owner strings a load shares: past it, owners are copied per hold as
// before, so a table of all-distinct owners costs no more than one map of this size.
const maxInternedOwners = 1 << 16

func newTableLoader() *tableLoader {
	return &tableLoader{sessions: make(map[uint64]*session), owners: make(map[string]string)}
}

// lock decodes the record of name (see decodeLock) and keeps it.
func (t *tableLoader) lock(name string, b []byte, want byte) error {
	l, err := decodeLockShared(name, b, want, t.owners)
	if err != nil {
		return err
	}
	t.locks = append(t.locks, l)
	return nil
}

// build makes the table's maps at their final sizes, links each session to the names it holds and waits
// for, and checks what one record alone cannot (linkState).
func (t *tableLoader) build() (map[uint64]*session, *lockTable, error) {
	locks := newLockTable(len(t.locks))
	holds := make(map[uint64]int, len(t.sessions))
	for _, l := range t.locks {
		locks.put(l)
		for i := range l.holds() {
			holds[l.holds()[i].session]++
		}
	}
	for id, n := range holds {
		if s := t.sessions[id]; s != nil && s.holds.len() == 0 {
			s.holds.reserve(n)
		}
	}
	t.owners = nil
	return t.sessions, locks, linkState(t.sessions, locks, t.locks)
}

// sharedOwner returns b as a string: the same string for the same bytes while owners has room, a new
// copy once it is full, and a plain copy when owners is nil.
func sharedOwner(owners map[string]string, b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if owners == nil {
		return string(b)
	}
	if s, ok := owners[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(owners) < maxInternedOwners {
		owners[s] = s
	}
	return s
}
