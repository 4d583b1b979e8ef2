package lockfsm

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/lockraft/lockraft/internal/scriptarg"
)

// TestScripts runs the golden scripts in testdata/. Each apply command prints the entry's index, its
// result and its events; dump prints the table; restart closes without commit, reopens the file and
// replays the log after DurableIndex; snapshot checks that WriteSnapshot → Restore → WriteSnapshot is
// byte-identical. Rewrite expectations with: go test ./lockfsm -run TestScripts -rewrite (then review).
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if filepath.Dir(path) != "testdata" {
			t.Skip("not a script (fixtures and fuzz corpora live in subdirectories)")
		}
		e := &scriptEnv{t: t, path: filepath.Join(t.TempDir(), "fsm.db")}
		e.open()
		defer func() { _ = e.f.Close() }()
		datadriven.RunTest(t, path, e.run)
	})
}

type logEntry struct {
	index uint64
	data  []byte
}

type scriptEnv struct {
	t    *testing.T
	path string
	f    *FSM
	last uint64
	log  []logEntry
}

func (e *scriptEnv) open() {
	e.f = mustOpen(e.t, e.path, Options{})
}

// argU is key's number; a script's numbers default to 0.
func argU(t *testing.T, td *datadriven.TestData, key string) uint64 {
	return scriptarg.Uint(t, td, key, 0)
}

var scriptPrims = map[string]Primitive{"": PrimMutex, "mutex": PrimMutex, "rw": PrimRW, "sem": PrimSemaphore,
	"elect": PrimElection}

// run handles one script command. Command arguments: s seq acked name owner wait lease max token target
// mode permits limit value prim=(mutex|rw|sem|elect) read (ModeShared) extra=(x,y) (ExtraNames) v1 (encode
// as version 1) longname badutf8.
func (e *scriptEnv) run(t *testing.T, td *datadriven.TestData) string {
	c := Command{
		Session: argU(t, td, "s"), Seq: argU(t, td, "seq"), AckedBelow: argU(t, td, "acked"),
		Name: scriptarg.String(td, "name"), Owner: scriptarg.String(td, "owner"), Wait: td.HasArg("wait"),
		LeaseMillis: argU(t, td, "lease"), MaxHolds: uint32(argU(t, td, "max")), Token: argU(t, td, "token"),
		Target: argU(t, td, "target"), Mode: Mode(argU(t, td, "mode")), Permits: uint32(argU(t, td, "permits")),
		Limit: uint32(argU(t, td, "limit")), Value: scriptarg.String(td, "value"),
	}
	prim, ok := scriptPrims[scriptarg.String(td, "prim")]
	if !ok {
		t.Fatalf("%s: unknown prim %q", td.Pos, scriptarg.String(td, "prim"))
	}
	c.Primitive = prim
	if td.HasArg("read") {
		c.Mode = ModeShared
	}
	if td.HasArg("v1") {
		c.Version = 1
	}
	if td.HasArg("longname") {
		c.Name = strings.Repeat("n", MaxNameLen+1)
	}
	if td.HasArg("longvalue") {
		c.Value = strings.Repeat("v", MaxValueLen+1)
	}
	if td.HasArg("badutf8") {
		c.Name = "bad\xff"
	}
	if td.HasArg("extra") {
		c.ExtraNames = scriptarg.Vals(td, "extra")
	}
	if n := argU(t, td, "manynames"); n > 0 {
		for i := range n {
			c.ExtraNames = append(c.ExtraNames, fmt.Sprintf("m%d", i))
		}
	}
	if k, ok := scriptKinds[td.Cmd]; ok {
		c.Kind = k
		switch k {
		case KindOpenSession:
			c.Node, c.TTLMillis = argU(t, td, "node"), argU(t, td, "ttl")
		case KindExpireSession:
			c.LockDelayMillis = argU(t, td, "delay")
		case KindCheckpoint:
			// checkpoint silent=1,2 silence=300 live=3: marks sessions silent (with one silence) or live.
			for _, a := range td.CmdArgs {
				for _, v := range a.Vals {
					id, _ := strconv.ParseUint(v, 10, 64)
					switch a.Key {
					case "silent":
						c.Checkpoints = append(c.Checkpoints, Checkpoint{Session: id, SilenceMillis: argU(t, td, "silence")})
					case "live":
						c.Checkpoints = append(c.Checkpoints, Checkpoint{Session: id, Live: true})
					}
				}
			}
		}
		return e.apply(td, c.AppendEncode(nil))
	}
	switch td.Cmd {
	case "garbage":
		// Malformed: a version-1 acquire whose field mask is a truncated varint.
		return e.apply(td, []byte{1, 5, 0x80})
	case "raw":
		b, err := hex.DecodeString(scriptarg.String(td, "hex"))
		if err != nil {
			t.Fatal(err)
		}
		return e.apply(td, b)
	case "decode":
		b, err := hex.DecodeString(scriptarg.String(td, "hex"))
		if err != nil {
			t.Fatal(err)
		}
		c, err := DecodeCommand(b)
		if err == nil {
			return fmt.Sprintf("ok: version %d %v %+v\n", c.Version, c.Kind, c)
		}
		return fmt.Sprintf("bad=%v newer=%v: %v\n", errors.Is(err, errBadCommand), errors.Is(err, ErrNewerFormat), err)
	case "encode":
		// Prints the encoding of the command given as "kind=..." with the usual arguments.
		c.Kind = scriptKinds[scriptarg.String(td, "kind")]
		return fmt.Sprintf("%x\n", c.AppendEncode(nil))
	case "dump":
		return dumpState(e.f)
	case "commit":
		if err := e.f.commit(); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("durable=%d\n", e.f.DurableIndex())
	case "restart":
		if err := e.f.Close(); err != nil {
			t.Fatal(err)
		}
		e.open()
		durable, replayed := e.f.DurableIndex(), 0
		for _, le := range e.log {
			if le.index > durable {
				e.f.Apply(le.index, le.data, nil)
				replayed++
			}
		}
		return fmt.Sprintf("reopened at durable=%d, replayed %d entries\n", durable, replayed)
	case "snapshot":
		var a, b bytes.Buffer
		if err := e.f.WriteSnapshot(&a); err != nil {
			t.Fatal(err)
		}
		g := mustOpen(t, filepath.Join(t.TempDir(), "restored.db"), Options{})
		defer func() { _ = g.Close() }()
		if err := g.Restore(bytes.NewReader(a.Bytes())); err != nil {
			t.Fatal(err)
		}
		if err := g.WriteSnapshot(&b); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Bytes(), b.Bytes()) || dumpState(e.f) != dumpState(g) {
			return "MISMATCH after restore\n"
		}
		return "snapshot round-trips\n"
	}
	t.Fatalf("%s: unknown command %q", td.Pos, td.Cmd)
	return ""
}

// scriptKinds are the script's commands that apply one Command, by the Kind they apply.
var scriptKinds = map[string]Kind{"noop": KindNoop, "open": KindOpenSession, "close": KindCloseSession,
	"expire": KindExpireSession, "acquire": KindAcquire, "release": KindRelease, "cancel": KindCancel,
	"proclaim": KindProclaim, "expire-lease": KindExpireLease, "lift": KindLiftDelay, "checkpoint": KindCheckpoint,
	"end-run": KindEndSessionRun}

func (e *scriptEnv) apply(td *datadriven.TestData, data []byte) string {
	index := e.last + 1
	if td.HasArg("index") {
		index = argU(e.t, td, "index")
	}
	r, ev := e.f.Apply(index, data, nil)
	if index > e.last {
		e.last = index
		e.log = append(e.log, logEntry{index, data})
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d: %s\n", index, fmtResult(r))
	for _, x := range ev {
		fmt.Fprintf(&sb, "  %s\n", fmtEvent(x))
	}
	return sb.String()
}

func fmtResult(r Result) string {
	var parts []string
	if r.Err != nil {
		parts = append(parts, "err="+strings.TrimPrefix(r.Err.Error(), "lockfsm: "))
	}
	if r.Status != StatusNone {
		parts = append(parts, r.Status.String())
	}
	add := func(k string, v uint64) {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, v))
		}
	}
	add("token", r.Token)
	add("holds", uint64(r.HoldCount))
	add("pos", uint64(r.Position))
	add("session", r.Session)
	if r.Holder != (Holder{}) {
		parts = append(parts, fmt.Sprintf("holder=%d/%s", r.Holder.Session, r.Holder.Owner))
	}
	if r.Duplicate {
		parts = append(parts, "duplicate")
	}
	return strings.Join(parts, " ")
}

func fmtEvent(x Event) string {
	parts := []string{x.Kind.String()}
	if x.Name != "" {
		parts = append(parts, "name="+x.Name)
	}
	if len(x.ExtraNames) > 0 {
		parts = append(parts, "extra="+strings.Join(x.ExtraNames, ","))
	}
	add := func(k string, v uint64) {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, v))
		}
	}
	add("s", x.Session)
	if x.Owner != "" {
		parts = append(parts, "owner="+x.Owner)
	}
	add("seq", x.Seq)
	add("token", x.Token)
	add("lease", x.LeaseMillis)
	add("node", x.Node)
	add("ttl", x.TTLMillis)
	add("delay", x.DelayMillis)
	if x.Mode == ModeShared {
		parts = append(parts, "read")
	}
	add("permits", uint64(x.Permits))
	if x.Value != "" {
		parts = append(parts, "value="+x.Value)
	}
	if x.Kind == EventLeader && x.Session == 0 {
		parts = append(parts, "none")
	}
	if x.Reason != ReasonNone {
		parts = append(parts, "reason="+x.Reason.String())
	}
	if x.FromQueue {
		parts = append(parts, "from-queue")
	}
	return strings.Join(parts, " ")
}

// dumpState prints the table. A mutex prints as it did before the catalogue (its holder on the lock's
// line); other primitives print their kind and one line per hold.
func dumpState(f *FSM) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "applied=%d\n", f.AppliedIndex())
	if h := f.Halted(); h != 0 {
		fmt.Fprintf(&sb, "halted at %d\n", h)
	}
	for _, s := range f.Sessions() {
		fmt.Fprintf(&sb, "session %d node=%d ttl=%d holds=%d waits=%d retained=%d", s.Session, s.Node,
			s.TTLMillis, s.Holds, s.Waits, s.Retained)
		if s.Silent {
			fmt.Fprintf(&sb, " silent=%dms", s.SilenceMillis)
		}
		if s.Ending {
			sb.WriteString(" ending")
		}
		sb.WriteString("\n")
	}
	for _, l := range f.Locks() {
		fmt.Fprintf(&sb, "lock %s", l.Name)
		if l.Primitive == PrimMutex {
			if l.Holder.Session != 0 {
				fmt.Fprintf(&sb, " holder=%d/%s holds=%d token=%d grant-seq=%d", l.Holder.Session, l.Holder.Owner,
					l.HoldCount, l.Token, l.GrantSeq)
			}
			if l.LeaseMillis != 0 {
				fmt.Fprintf(&sb, " lease=%d", l.LeaseMillis)
			}
			if len(l.Holds) > 0 && l.Holds[0].Names != nil {
				fmt.Fprintf(&sb, " names=%s", strings.Join(l.Holds[0].Names, ","))
			}
		} else {
			fmt.Fprintf(&sb, " %s", l.Primitive)
			if l.Primitive == PrimSemaphore {
				fmt.Fprintf(&sb, " in-use=%d/%d", l.PermitsInUse, l.Permits)
			}
			if l.Value != "" {
				fmt.Fprintf(&sb, " value=%s", l.Value)
			}
		}
		if l.Delayed {
			fmt.Fprintf(&sb, " delayed@%d", l.DelayToken)
		}
		sb.WriteString("\n")
		if l.Primitive != PrimMutex {
			for _, h := range l.Holds {
				fmt.Fprintf(&sb, "  hold %d/%s", h.Session, h.Owner)
				if l.Primitive == PrimRW {
					fmt.Fprintf(&sb, " %s", map[Mode]string{ModeShared: "read", ModeExclusive: "write"}[h.Mode])
				}
				if h.Permits != 0 {
					fmt.Fprintf(&sb, " permits=%d", h.Permits)
				}
				fmt.Fprintf(&sb, " holds=%d token=%d grant-seq=%d", h.HoldCount, h.Token, h.GrantSeq)
				if h.LeaseMillis != 0 {
					fmt.Fprintf(&sb, " lease=%d", h.LeaseMillis)
				}
				sb.WriteString("\n")
			}
		}
		for _, w := range l.Waiters {
			fmt.Fprintf(&sb, "  %d. %d/%s seq=%d enqueued=%d", w.Position, w.Session, w.Owner, w.Seq, w.Enqueued)
			if w.LeaseMillis != 0 {
				fmt.Fprintf(&sb, " lease=%d", w.LeaseMillis)
			}
			if l.Primitive == PrimRW {
				fmt.Fprintf(&sb, " %s", map[Mode]string{ModeShared: "read", ModeExclusive: "write"}[w.Mode])
			}
			if w.Permits != 0 {
				fmt.Fprintf(&sb, " permits=%d", w.Permits)
			}
			if w.Value != "" {
				fmt.Fprintf(&sb, " value=%s", w.Value)
			}
			if w.Names != nil {
				fmt.Fprintf(&sb, " names=%s", strings.Join(w.Names, ","))
			}
			sb.WriteString("\n")
		}
	}
	return sb.String()
}
