package lockfsm

import (
	"fmt"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

// Kind says what a Command does.
type Kind uint8

// Command kinds. The numbers are part of the wire format.
const (
	// KindNoop has no effect (a node may propose it to learn it is caught up).
	KindNoop Kind = iota + 1
	// KindOpenSession opens a session for Node with TTLMillis. The session id is the raft index of the entry.
	KindOpenSession
	// KindCloseSession closes Session gracefully: releases all its holds, removes all its waiters and grants
	// the freed names to their next waiters, in this one apply; with Limit (version 3), in runs of at most
	// Limit names when it has more (ending.go).
	KindCloseSession
	// KindExpireSession is KindCloseSession proposed by the leader when the TTL ran out. With
	// LockDelayMillis > 0 every freed name is delayed (granted to nobody) until a KindLiftDelay for it.
	KindExpireSession
	// KindAcquire: Session, Seq, AckedBelow, Name, Owner, Wait, LeaseMillis, MaxHolds, and for the catalogue
	// (version 2) Primitive, Mode, Permits, Limit, Value, ExtraNames. See the package rules.
	KindAcquire
	// KindRelease: Session, Seq, AckedBelow, Name, Owner; Primitive, Mode, Token (version 2). Drops one hold
	// level.
	KindRelease
	// KindCancel: Session, Seq, AckedBelow, Name, Owner, Target (the Seq of the acquire to undo).
	KindCancel
	// KindExpireLease: Name, Token; Session and Owner (version 2) pick one hold among several with that token.
	// Leader-proposed; a no-op unless a hold of the name has that token.
	KindExpireLease
	// KindLiftDelay: Name, Token (the index that started the delay). Leader-proposed; stale ones are no-ops.
	KindLiftDelay
	// kindV1End: the kinds below it are those of version-1 commands.
	kindV1End
)

// Kinds of version 2.
const (
	// KindCheckpoint (version 2): Checkpoints (and Token, Seq: the proposing leader's term and its own count,
	// which only that leader reads). Leader-proposed: records, per listed session, how long it had been silent
	// when the entry was proposed, or that it is live again (checkpoint.go). It changes no lock.
	KindCheckpoint Kind = 10
	// KindProclaim (version 2): Session, Seq, AckedBelow, Name, Owner, Value, optional Token. The current
	// leader of an election changes the value it announces.
	KindProclaim Kind = 11
	// KindEndSessionRun (version 3): Session, Limit. Leader-proposed: ends the next run of at most Limit
	// names of a session that is ending (ending.go); a no-op for any other session.
	KindEndSessionRun Kind = 12
	kindEnd           Kind = 13
)

var kindNames = [...]string{KindNoop: "Noop", KindOpenSession: "OpenSession", KindCloseSession: "CloseSession",
	KindExpireSession: "ExpireSession", KindAcquire: "Acquire", KindRelease: "Release", KindCancel: "Cancel",
	KindExpireLease: "ExpireLease", KindLiftDelay: "LiftDelay", KindCheckpoint: "Checkpoint",
	KindProclaim: "Proclaim", KindEndSessionRun: "EndSessionRun"}

func (k Kind) String() string { return enumName(k, kindNames[:], "Kind") }

// enumName is the name of v in names, or "typ(v)" when names has none for it.
func enumName[T ~uint8](v T, names []string, typ string) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, uint8(v))
}

// known says whether k is a kind of version v.
func (k Kind) known(v byte) bool {
	if k > 0 && k < kindV1End {
		return true
	}
	return v >= 2 && (k == KindCheckpoint || k == KindProclaim) || v >= 3 && k == KindEndSessionRun
}

// Mode is the sharing mode of an acquire or release of a read-write lock. Every other primitive is
// exclusive (ModeExclusive).
type Mode uint8

const (
	// ModeExclusive: a mutex, semaphore or election hold, or the write side of a read-write lock.
	ModeExclusive Mode = 0
	// ModeShared: the read side of a read-write lock.
	ModeShared Mode = 1
	modeEnd    Mode = 2
)

var modeNames = [...]string{ModeExclusive: "exclusive", ModeShared: "shared"}

func (m Mode) String() string { return enumName(m, modeNames[:], "Mode") }

// Primitive says what a lock name is. A name's primitive is fixed by the acquire that puts it in the table
// and lasts while the name has a hold, a waiter or a lock-delay; commands of another primitive on it get
// ErrWrongKind.
type Primitive uint8

const (
	// PrimMutex: one exclusive, reentrant owner; with ExtraNames, an atomic multi-name acquire of mutexes.
	PrimMutex Primitive = iota
	// PrimRW: a read-write lock: readers (ModeShared) or one writer (ModeExclusive), FIFO over one queue.
	PrimRW
	// PrimSemaphore: Limit permits; each acquire takes Permits of them as its own hold.
	PrimSemaphore
	// PrimElection: one leader at a time, which carries a Value; acquire = campaign, release = resign.
	PrimElection
	primEnd
)

var primNames = [...]string{"mutex", "rwlock", "semaphore", "election"}

func (p Primitive) String() string { return enumName(p, primNames[:], "Primitive") }

// Command is one state machine command, carried in one raft entry. Which fields matter depends on Kind.
type Command struct {
	Kind                     Kind
	Session, Seq, AckedBelow uint64
	Name, Owner              string
	Wait                     bool
	LeaseMillis, TTLMillis   uint64
	LockDelayMillis          uint64
	MaxHolds                 uint32 // reentrancy limit for this acquire; 0 = defaultMaxHolds
	Node, Token, Target      uint64
	Mode                     Mode     // ModeShared: the read side of a read-write lock
	Permits                  uint32   // semaphore: permits this acquire takes (0 means 1)
	ExtraNames               []string // a multi-name mutex acquire: the names besides Name
	Primitive                Primitive
	Limit                    uint32       // semaphore: its number of permits (N)
	Value                    string       // election: the value a campaign or proclaim announces
	Checkpoints              []Checkpoint // KindCheckpoint: one mark per session

	// Version is the encoding version. DecodeCommand sets it from the entry; a version-1 command keeps the
	// meaning it had when version 1 was the newest: Mode, Permits > 1 and ExtraNames are errUnsupported and
	// an expiry's Session and Owner are ignored. AppendEncode writes Version 1 or 2 when set (2 when the
	// command cannot be written as version 1), and with Version 0 the lowest version that means the same.
	Version uint8
}

// commandVersion is the newest encoding, the first byte of every encoded command.
//
// Layout (both versions): version byte, kind byte, a uvarint bit mask of the fields present, then each
// present field in bit order: integers as uvarints, strings as uvarint length + bytes, Wait as no payload
// (its bit set means true), ExtraNames as a uvarint count + strings. Zero-valued fields are omitted, so a
// typical acquire takes about 20 bytes plus its name and owner.
//
// Version 1 has kinds 1–9 and field bits 0–15. Version 2 adds KindCheckpoint (10) with its bit
// Checkpoints (1<<16: a uvarint count + per mark a uvarint session and a uvarint code, checkpoint.go),
// KindProclaim (11) and the bits Primitive (1<<17), Limit (1<<18) and Value (1<<19), and gives Mode,
// Permits and ExtraNames their meaning (in version 1 they are reserved). Version 3 adds
// KindEndSessionRun (12) and gives Limit a meaning in KindCloseSession and KindExpireSession (the run size
// of a session's end, ending.go); in version 2 it is ignored there.
//
// Errors. Truncation, trailing bytes, version 0, kind 0 and out-of-range integers are errBadCommand:
// malformed bytes, which every version rejects the same way. A version above commandVersion, and in a
// version-2 command an unknown kind, field bit, Mode or Primitive, are ErrNewerFormat: a well-formed entry
// of a format this code does not know. A version-1 command is frozen: unknown kinds and bits in it are
// errBadCommand, as they were when version 1 was the newest, so old logs replay as they first applied.
const commandVersion = 3

const (
	fSession = 1 << iota
	fSeq
	fAckedBelow
	fName
	fOwner
	fWait
	fLease
	fTTL
	fLockDelay
	fMaxHolds
	fNode
	fToken
	fTarget
	fMode
	fPermits
	fExtraNames
	fV1All = fExtraNames<<1 - 1
)

// Bits of version 2.
const (
	fCheckpoints = 1 << 16
	fPrimitive   = 1 << 17
	fLimit       = 1 << 18
	fValue       = 1 << 19
	fAll         = fV1All | fCheckpoints | fPrimitive | fLimit | fValue
)

// maxExtraNames bounds decoding work on hostile input (Apply allows MaxMultiNames).
const maxExtraNames = 1024

// fitsV1 says whether every kind and field of c exists in version 1.
func (c *Command) fitsV1() bool {
	return c.Kind < kindV1End && c.Primitive == PrimMutex && c.Limit == 0 && c.Value == ""
}

// needsV3 says whether c means something only version 3 has: a session's end in runs.
func (c *Command) needsV3() bool {
	return c.Kind == KindEndSessionRun ||
		c.Version != 2 && c.Limit != 0 && (c.Kind == KindCloseSession || c.Kind == KindExpireSession)
}

// encodingVersion is the version AppendEncode writes for c.
func (c *Command) encodingVersion() byte {
	if c.Version >= 3 || c.needsV3() {
		return 3
	}
	if c.Version >= 2 || !c.fitsV1() {
		return 2
	}
	if c.Version == 1 {
		return 1
	}
	// Fields that version 1 has but gives another meaning.
	if c.Mode != ModeExclusive || c.Permits > 1 || len(c.ExtraNames) != 0 ||
		(c.Kind == KindExpireLease && (c.Session != 0 || c.Owner != "")) {
		return 2
	}
	return 1
}

// AppendEncode appends the encoding of c to b and returns the extended slice. It allocates only if b lacks
// capacity.
func (c *Command) AppendEncode(b []byte) []byte {
	var m uint64
	set := func(bit uint64, present bool) {
		if present {
			m |= bit
		}
	}
	set(fSession, c.Session != 0)
	set(fSeq, c.Seq != 0)
	set(fAckedBelow, c.AckedBelow != 0)
	set(fName, c.Name != "")
	set(fOwner, c.Owner != "")
	set(fWait, c.Wait)
	set(fLease, c.LeaseMillis != 0)
	set(fTTL, c.TTLMillis != 0)
	set(fLockDelay, c.LockDelayMillis != 0)
	set(fMaxHolds, c.MaxHolds != 0)
	set(fNode, c.Node != 0)
	set(fToken, c.Token != 0)
	set(fTarget, c.Target != 0)
	set(fMode, c.Mode != 0)
	set(fPermits, c.Permits != 0)
	set(fExtraNames, len(c.ExtraNames) != 0)
	set(fPrimitive, c.Primitive != 0)
	set(fLimit, c.Limit != 0)
	set(fValue, c.Value != "")
	set(fCheckpoints, len(c.Checkpoints) != 0)
	if b == nil {
		// Room for the usual command (a few varints, a name and an owner)
		// in one allocation rather than a slice grown field by field.
		b = make([]byte, 0, 48+len(c.Name)+len(c.Owner)+len(c.Value))
	}
	b = append(b, c.encodingVersion(), byte(c.Kind))
	b = protowire.AppendVarint(b, m)
	u := func(bit uint64, v uint64) {
		if m&bit != 0 {
			b = protowire.AppendVarint(b, v)
		}
	}
	s := func(bit uint64, v string) {
		if m&bit != 0 {
			b = protowire.AppendVarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	u(fSession, c.Session)
	u(fSeq, c.Seq)
	u(fAckedBelow, c.AckedBelow)
	s(fName, c.Name)
	s(fOwner, c.Owner)
	u(fLease, c.LeaseMillis)
	u(fTTL, c.TTLMillis)
	u(fLockDelay, c.LockDelayMillis)
	u(fMaxHolds, uint64(c.MaxHolds))
	u(fNode, c.Node)
	u(fToken, c.Token)
	u(fTarget, c.Target)
	u(fMode, uint64(c.Mode))
	u(fPermits, uint64(c.Permits))
	if m&fExtraNames != 0 {
		b = protowire.AppendVarint(b, uint64(len(c.ExtraNames)))
		for _, n := range c.ExtraNames {
			b = protowire.AppendVarint(b, uint64(len(n)))
			b = append(b, n...)
		}
	}
	if m&fCheckpoints != 0 {
		b = appendCheckpoints(b, c.Checkpoints)
	}
	u(fPrimitive, uint64(c.Primitive))
	u(fLimit, uint64(c.Limit))
	s(fValue, c.Value)
	return b
}

// DecodeCommand decodes an encoded command. It never panics, and the returned strings do not alias b.
// Malformed bytes return an error wrapping errBadCommand; a well-formed entry of a newer format (a
// version, kind, field, mode or primitive this code does not know) one wrapping ErrNewerFormat. See
// ErrNewerFormat for what the node must do with each.
func DecodeCommand(b []byte) (Command, error) {
	var c Command
	err := decodeInto(&c, b, false)
	return c, err
}

// DecodeCommandView decodes b into c as DecodeCommand does, except that c's strings point into b instead of
// being copied: they are valid only while b is unchanged, and the caller must not keep them (or c) beyond
// that. c's ExtraNames and Checkpoints backing arrays are reused. It is for a caller that reads a command and
// lets it go, such as a leader authorising a forwarded proposal before it proposes the bytes unchanged, or
// a node applying a committed entry (the FSM copies what it keeps: ApplyCommand).
func DecodeCommandView(b []byte, c *Command) error {
	return decodeInto(c, b, true)
}

// Reset empties c for the next DecodeCommandView, keeping its lists' room and dropping every reference it
// held into the last decoded entry's bytes.
func (c *Command) Reset() {
	clear(c.ExtraNames)
	*c = Command{ExtraNames: c.ExtraNames[:0], Checkpoints: c.Checkpoints[:0]}
}

// decodeInto decodes b into c, reusing c.ExtraNames' and c.Checkpoints' backing arrays (kept, empty, when
// the command has none; nil stays nil). With alias set, strings point into b (no allocation): the caller
// must not keep them beyond b's lifetime.
func decodeInto(c *Command, b []byte, alias bool) error {
	extra := c.ExtraNames[:0]
	marks := c.Checkpoints[:0]
	*c = Command{ExtraNames: extra, Checkpoints: marks}
	if len(b) == 0 || b[0] == 0 {
		return fmt.Errorf("%w: %d bytes, no format version", errBadCommand, len(b))
	}
	v := b[0]
	if v > commandVersion {
		return fmt.Errorf("%w: command format version %d (this code knows up to %d)", ErrNewerFormat, v,
			commandVersion)
	}
	if len(b) < 3 {
		return fmt.Errorf("%w: %d bytes", errBadCommand, len(b))
	}
	c.Version = v
	c.Kind = Kind(b[1])
	// Unknown things in version 1 stay malformed, as they were when it was the newest.
	unknown := ErrNewerFormat
	if v == 1 {
		unknown = errBadCommand
	}
	if c.Kind == 0 {
		return fmt.Errorf("%w: kind 0", errBadCommand)
	}
	if !c.Kind.known(v) {
		return fmt.Errorf("%w: unknown kind %d in a version %d command", unknown, b[1], v)
	}
	d := decoder{b: b[2:], alias: alias}
	m := d.uvarint()
	if d.bad {
		return fmt.Errorf("%w: truncated field mask", errBadCommand)
	}
	all := uint64(fAll)
	if v == 1 {
		all = fV1All
	}
	if m&^all != 0 {
		return fmt.Errorf("%w: unknown fields %#x in a version %d command", unknown, m&^all, v)
	}
	u := func(bit uint64) uint64 {
		if m&bit != 0 {
			return d.uvarint()
		}
		return 0
	}
	u32 := func(bit uint64) uint32 {
		v := u(bit)
		if v > 1<<32-1 {
			d.bad = true
		}
		return uint32(v)
	}
	u8 := func(bit uint64) uint8 {
		v := u(bit)
		if v > 255 {
			d.bad = true
		}
		return uint8(v)
	}
	s := func(bit uint64) string {
		if m&bit != 0 {
			return d.str()
		}
		return ""
	}
	c.Session = u(fSession)
	c.Seq = u(fSeq)
	c.AckedBelow = u(fAckedBelow)
	c.Name = s(fName)
	c.Owner = s(fOwner)
	c.Wait = m&fWait != 0
	c.LeaseMillis = u(fLease)
	c.TTLMillis = u(fTTL)
	c.LockDelayMillis = u(fLockDelay)
	c.MaxHolds = u32(fMaxHolds)
	c.Node = u(fNode)
	c.Token = u(fToken)
	c.Target = u(fTarget)
	c.Mode = Mode(u8(fMode))
	c.Permits = u32(fPermits)
	if m&fExtraNames != 0 {
		n := d.uvarint()
		if n == 0 || n > maxExtraNames {
			d.bad = true
		}
		for i := uint64(0); i < n && !d.bad; i++ {
			extra = append(extra, d.str())
		}
	}
	c.ExtraNames = extra
	if m&fCheckpoints != 0 {
		marks = d.checkpoints(marks)
	}
	c.Checkpoints = marks
	c.Primitive = Primitive(u8(fPrimitive))
	c.Limit = u32(fLimit)
	c.Value = s(fValue)
	if d.bad {
		return fmt.Errorf("%w: truncated or malformed %v", errBadCommand, c.Kind)
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", errBadCommand, len(d.b))
	}
	if v >= 2 && (c.Mode >= modeEnd || c.Primitive >= primEnd) {
		return fmt.Errorf("%w: unknown mode %d or primitive %d", ErrNewerFormat, c.Mode, c.Primitive)
	}
	return nil
}

// decoder reads uvarints and strings, remembering the first failure instead of returning it each time.
type decoder struct {
	b      []byte
	bad    bool
	alias  bool
	owners map[string]string // set while loading a table: owner strings shared (tableLoader)
}

func (d *decoder) uvarint() uint64 {
	if d.bad {
		return 0
	}
	v, n := protowire.ConsumeVarint(d.b)
	if n < 0 {
		d.bad = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.bad || n > uint64(len(d.b)) {
		d.bad = true
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// owner reads an owner string, shared with earlier equal ones while a table loads (sharedOwner).
func (d *decoder) owner() string {
	if d.owners == nil {
		return d.str()
	}
	return sharedOwner(d.owners, d.bytes())
}

func (d *decoder) str() string {
	v := d.bytes()
	if len(v) == 0 {
		return ""
	}
	if d.alias {
		return unsafe.String(&v[0], len(v))
	}
	return string(v)
}
