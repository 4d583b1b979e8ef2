package lockfsm

import "google.golang.org/protobuf/encoding/protowire"

// Session checkpoints (KindCheckpoint).
//
// Only the leader keeps session deadlines, on its own monotonic clock, and keepalives are not logged. A
// leader that takes over must therefore work out, for each session, a moment no acknowledged keepalive
// was received after (its "base"), and expire the session at base + TTL. A checkpoint carries that over
// the log: the leader that proposes it states how long (SilenceMillis) each listed session had been
// silent when it proposed the entry, and promises to acknowledge none of that session's later keepalives
// until a later checkpoint marks it Live again and is applied. Each node notes its own monotonic time
// when it applies a checkpoint; a later leader takes base = that time − SilenceMillis, which is never
// earlier than the real last receive (an entry is applied after it was proposed). The argument in full
// is in the package doc of node/internal/lease.
//
// lockfsm only stores the latest mark of each session (the session record's ckpt, record version 3) so
// that a node restarted from its state file, or restored from a snapshot, knows which sessions are
// checkpointed; the time of the mark is node memory, never state (S7: no clock here).

// Checkpoint is one session's mark in a KindCheckpoint entry.
type Checkpoint struct {
	Session uint64
	// Live: the session was heard from again; later leaders start its deadline afresh. SilenceMillis is
	// then 0.
	Live bool
	// SilenceMillis: how long the session had been silent when the entry was proposed (rounded down).
	SilenceMillis uint64
}

// maxCheckpoints bounds the marks of one entry (decoding work on hostile input).
const maxCheckpoints = 1 << 16

// code is the mark's wire and record form: 0 = live, silence + 1 = silent.
func (c Checkpoint) code() uint64 {
	if c.Live {
		return 0
	}
	return c.SilenceMillis + 1
}

func checkpointFromCode(session, code uint64) Checkpoint {
	if code == 0 {
		return Checkpoint{Session: session, Live: true}
	}
	return Checkpoint{Session: session, SilenceMillis: code - 1}
}

func appendCheckpoints(b []byte, cs []Checkpoint) []byte {
	b = protowire.AppendVarint(b, uint64(len(cs)))
	for _, c := range cs {
		b = protowire.AppendVarint(b, c.Session)
		b = protowire.AppendVarint(b, c.code())
	}
	return b
}

// checkpoints decodes a mark list into dst[:0]. A count of 0 or above maxCheckpoints, a session id 0 or
// a silence that does not fit is malformed.
func (d *decoder) checkpoints(dst []Checkpoint) []Checkpoint {
	n := d.uvarint()
	if n == 0 || n > maxCheckpoints || n > uint64(len(d.b))/2 {
		d.bad = true
		return dst
	}
	for i := uint64(0); i < n && !d.bad; i++ {
		s, code := d.uvarint(), d.uvarint()
		if s == 0 || code == 1<<64-1 {
			d.bad = true
		}
		dst = append(dst, checkpointFromCode(s, code))
	}
	return dst
}

// checkpoint applies KindCheckpoint: the latest mark of each listed session that is open is stored
// (later marks of one session in the same entry win); unknown sessions are ignored. No lock changes and
// no event is emitted; the node reads the marks from the command itself.
func (f *FSM) checkpoint(c *Command, ev []Event) (Result, []Event) {
	for _, m := range c.Checkpoints {
		s := f.sessions[m.Session]
		if s == nil {
			continue
		}
		if code := m.code(); s.ckpt != code {
			s.ckpt = code
			f.dirtySessions[s.id] = struct{}{}
		}
	}
	return Result{Status: Noop}, ev
}
