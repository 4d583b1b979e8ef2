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
	// the freed names to their next waiters, in this one apply.
	KindCloseSession
	// KindExpireSession is KindCloseSession proposed by the leader when the TTL ran out. With
	// LockDelayMillis > 0 every freed name is delayed (granted to nobody) until a KindLiftDelay for it.
	KindExpireSession
	// KindAcquire: Session, Seq, AckedBelow, Name, Owner, Wait, LeaseMillis, MaxHolds.
	KindAcquire
	// KindRelease: Session, Seq, AckedBelow, Name, Owner. Drops one hold level.
	KindRelease
	// KindCancel: Session, Seq, AckedBelow, Name, Owner, Target (the Seq of the acquire to undo).
	KindCancel
	// KindExpireLease: Name, Token. Leader-proposed; a no-op unless Token is the name's current token.
	KindExpireLease
	// KindLiftDelay: Name, Token (the index that started the delay). Leader-proposed; stale ones are no-ops.
	KindLiftDelay
	// KindCheckpoint: Checkpoints (and Token, Seq: the proposing leader's term and its own count, which only
	// that leader reads). Leader-proposed: records, per listed session, how long it had been silent when the
	// entry was proposed, or that it is live again (checkpoint.go). It changes no lock.
	KindCheckpoint
	kindEnd
)

var kindNames = [...]string{"", "Noop", "OpenSession", "CloseSession", "ExpireSession", "Acquire", "Release",
	"Cancel", "ExpireLease", "LiftDelay", "Checkpoint"}

func (k Kind) String() string {
	if k > 0 && k < kindEnd {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Mode is the sharing mode of an acquire. Only ModeExclusive is implemented.
type Mode uint8

const (
	// ModeExclusive is an ordinary mutex hold.
	ModeExclusive Mode = 0
	// ModeShared is reserved for read-write locks; Apply rejects it with ErrUnsupported.
	ModeShared Mode = 1
)

// Command is one state machine command, carried in one raft entry. Which fields matter depends on Kind.
type Command struct {
	Kind                     Kind
	Session, Seq, AckedBelow uint64
	Name, Owner              string
	Wait                     bool
	LeaseMillis, TTLMillis   uint64
	LockDelayMillis          uint64
	MaxHolds                 uint32 // reentrancy limit for this acquire; 0 = DefaultMaxHolds
	Node, Token, Target      uint64
	Mode                     Mode         // reserved: must be ModeExclusive
	Permits                  uint32       // reserved: must be 0 or 1
	ExtraNames               []string     // reserved: must be empty
	Checkpoints              []Checkpoint // KindCheckpoint: one mark per session
}

// commandVersion is the first byte of every encoded command.
//
// Layout of version 1: version byte, kind byte, a uvarint bit mask of the fields present, then each present
// field in bit order: integers as uvarints, strings as uvarint length + bytes, Wait as no payload (its bit
// set means true), ExtraNames as a uvarint count + strings, Checkpoints as a uvarint count + per mark a
// uvarint session and a uvarint code (checkpoint.go). Zero-valued fields are omitted, so a typical acquire
// takes about 20 bytes plus its name and owner. Unknown bits, truncation and trailing bytes are
// ErrBadCommand. KindCheckpoint and the Checkpoints bit (1<<16) came later within version 1: entries
// written before them never use either, so they decode as before.
const commandVersion = 1

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
	fCheckpoints // 1<<16
	fAll         = fCheckpoints<<1 - 1
)

// maxExtraNames bounds decoding work on hostile input.
const maxExtraNames = 1024

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
	set(fCheckpoints, len(c.Checkpoints) != 0)
	if b == nil {
		// Room for the usual command (a few varints, a name and an owner)
		// in one allocation rather than a slice grown field by field.
		b = make([]byte, 0, 48+len(c.Name)+len(c.Owner))
	}
	b = append(b, commandVersion, byte(c.Kind))
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
	return b
}

// DecodeCommand decodes an encoded command. Any malformed input returns an error wrapping ErrBadCommand;
// it never panics. The returned strings do not alias b.
func DecodeCommand(b []byte) (Command, error) {
	var c Command
	err := decodeInto(&c, b, false)
	return c, err
}

// decodeInto decodes b into c, reusing c.ExtraNames' backing array. With alias set, strings point into b
// (no allocation): the caller must not keep them beyond b's lifetime.
func decodeInto(c *Command, b []byte, alias bool) error {
	extra := c.ExtraNames[:0]
	marks := c.Checkpoints[:0]
	*c = Command{}
	if len(b) < 3 {
		return fmt.Errorf("%w: %d bytes", ErrBadCommand, len(b))
	}
	if b[0] != commandVersion {
		return fmt.Errorf("%w: unknown format version %d", ErrBadCommand, b[0])
	}
	c.Kind = Kind(b[1])
	if c.Kind == 0 || c.Kind >= kindEnd {
		return fmt.Errorf("%w: unknown kind %d", ErrBadCommand, b[1])
	}
	d := decoder{b: b[2:], alias: alias}
	m := d.uvarint()
	if m&^uint64(fAll) != 0 {
		return fmt.Errorf("%w: unknown fields %#x", ErrBadCommand, m&^uint64(fAll))
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
	mode := u(fMode)
	if mode > 255 {
		d.bad = true
	}
	c.Mode = Mode(mode)
	c.Permits = u32(fPermits)
	if m&fExtraNames != 0 {
		n := d.uvarint()
		if n == 0 || n > maxExtraNames {
			d.bad = true
		}
		for i := uint64(0); i < n && !d.bad; i++ {
			extra = append(extra, d.str())
		}
		c.ExtraNames = extra
	}
	if m&fCheckpoints != 0 {
		c.Checkpoints = d.checkpoints(marks)
	}
	if d.bad {
		return fmt.Errorf("%w: truncated or malformed %v", ErrBadCommand, c.Kind)
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrBadCommand, len(d.b))
	}
	return nil
}

// decoder reads uvarints and strings, remembering the first failure instead of returning it each time.
type decoder struct {
	b     []byte
	bad   bool
	alias bool
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
