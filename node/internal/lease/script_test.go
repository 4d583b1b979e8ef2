package lease

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/internal/scriptarg"
	"github.com/lockraft/lockraft/lockfsm"
)

// TestScripts runs the scripts in testdata/ against one node's engine, a
// real lock table (lockfsm) and a stepping clock that starts at T+0 and
// moves only with "advance". Times print as milliseconds since T+0.
//
// Commands:
//
//	init [self=1] [keepalive=1000] [retry=500] [election=1000] [tick=100]
//	     [delay=0] [drift=0] [knobs=(follower-expiry,restart-deadlines,
//	     revive-as-silence-zero,ack-while-marked)]
//	                        a new world: an empty lock table, the clock at
//	                        0, a new engine; restart: a new engine on the
//	                        same table at the same time (memory is lost)
//	advance ms=N            the clock moves on
//	open node= ttl=         apply an OpenSession now (as every entry: the
//	                        engine sees its result and events at once)
//	acquire s= name= owner= [lease=] [wait] [rw|read]
//	release s= name= owner= [rw|read]
//	expire s= [delay=]      apply an ExpireSession proposed elsewhere
//	checkpoint [silent=(..) silence=] [live=(..)] [term=] [seq=]
//	                        apply a checkpoint another leader proposed
//	lead term= [voters=(..)] BecomeLeader (voters default to self)
//	ready                   Ready: prints what it proposes
//	stepdown                StepDown
//	tick                    Tick: prints what it proposes (queued)
//	follower-expiry own=    the planted FollowerExpiry tick
//	commit                  apply every queued proposal, in order
//	drop                    lose every queued proposal
//	ext sessions=(..)       the leader's heartbeat extension for rounds of
//	                        sessions
//	keepalive s= [ago=]     a keepalive received ago ms before now, its
//	                        round issued and confirmed now: NoteArrival,
//	                        SeeRound, Keepalive, FlushRevives (queued)
//	renew name= token= [s= owner=] [ago=]
//	heartbeat term= [sessions=(..)] [report]
//	                        a leader's heartbeat reaches this node (and it
//	                        answers it: "report" asks for its report)
//	report from= [start=] [any=] [seen=(id:ago,..)] [opened=(id:ago,..)]
//	                        a follower's contact report for this leader's
//	                        term (times are ms before now)
//	near ms=                DeadlineBefore(now+ms)
//	gate older|open         the version gate (Host.OlderMemberKnown)
//	state                   the leader's timers; memory: the node memory
//
// Answers to keepalives print as "reply s=… OK" in the output of the
// command during which the engine gave them. Rewrite expectations with:
// go test ./node/internal/lease -run TestScripts -rewrite (then review).
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		e := &scriptEnv{dir: t.TempDir()}
		defer e.closeTable()
		datadriven.RunTest(t, path, e.run)
	})
}

var t0 = time.Unix(1_000_000, 0)

type scriptHost struct {
	fsm   *lockfsm.FSM
	older bool
}

func (h *scriptHost) Sessions() []lockfsm.SessionInfo { return h.fsm.Sessions() }
func (h *scriptHost) Locks() []lockfsm.LockInfo       { return h.fsm.Locks() }
func (h *scriptHost) HasSession(id uint64) bool       { return h.fsm.HasSession(id) }
func (h *scriptHost) OlderMemberKnown() bool          { return h.older }

type scriptEnv struct {
	dir     string
	tables  int
	host    *scriptHost
	cfg     Config
	e       *Engine
	now     time.Time
	index   uint64
	queued  []lockfsm.Command
	out     strings.Builder // the current command's output
	replies []string        // answers given during the current command
}

func ms(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return strconv.FormatInt(t.Sub(t0).Milliseconds(), 10)
}

func argMS(t *testing.T, td *datadriven.TestData, key string, def uint64) time.Duration {
	return time.Duration(scriptarg.Uint(t, td, key, def)) * time.Millisecond
}

// argAgo reads "id:ms" pairs: per id, the moment ms before now.
func (s *scriptEnv) argAgo(t *testing.T, td *datadriven.TestData, key string) map[uint64]time.Time {
	m := map[uint64]time.Time{}
	for _, a := range td.CmdArgs {
		if a.Key != key {
			continue
		}
		for _, v := range a.Vals {
			id, ago, ok := strings.Cut(v, ":")
			i, err1 := strconv.ParseUint(id, 10, 64)
			d, err2 := strconv.ParseUint(ago, 10, 64)
			if !ok || err1 != nil || err2 != nil {
				t.Fatalf("%s: %s=%s: want id:ms", td.Pos, key, v)
			}
			m[i] = s.now.Add(-time.Duration(d) * time.Millisecond)
		}
	}
	return m
}

// rwArgs: "rw" is a read-write lock's writer, "read" its reader.
func rwArgs(td *datadriven.TestData, c *lockfsm.Command) {
	if td.HasArg("rw") || td.HasArg("read") {
		c.Primitive = lockfsm.PrimRW
	}
	if td.HasArg("read") {
		c.Mode = lockfsm.ModeShared
	}
}

func (s *scriptEnv) closeTable() {
	if s.host != nil {
		_ = s.host.fsm.Close()
	}
}

func (s *scriptEnv) reply(session uint64) func(Status) {
	return func(st Status) { s.replies = append(s.replies, fmt.Sprintf("reply s=%d %v", session, st)) }
}

func (s *scriptEnv) run(t *testing.T, td *datadriven.TestData) string {
	s.out.Reset()
	s.replies = nil
	if s.e == nil && td.Cmd != "init" {
		t.Fatalf("%s: init first", td.Pos)
	}
	switch td.Cmd {
	case "init":
		s.cfg = Config{
			Self:              scriptarg.Uint(t, td, "self", 1),
			KeepaliveInterval: argMS(t, td, "keepalive", 1000),
			RetryInterval:     argMS(t, td, "retry", 500),
			ElectionTimeout:   argMS(t, td, "election", 1000),
			TickInterval:      argMS(t, td, "tick", 100),
			LockDelay:         argMS(t, td, "delay", 0),
		}
		if d := scriptarg.String(td, "drift"); d != "" {
			v, err := strconv.ParseFloat(d, 64)
			if err != nil {
				t.Fatal(err)
			}
			s.cfg.DriftRatio = v
		}
		for _, a := range td.CmdArgs {
			if a.Key != "knobs" {
				continue
			}
			for _, k := range a.Vals {
				switch k {
				case "follower-expiry":
					s.cfg.Knobs.FollowerExpiry = true
				case "restart-deadlines":
					s.cfg.Knobs.RestartDeadlinesOnFailover = true
				case "revive-as-silence-zero":
					s.cfg.Knobs.ReviveAsSilenceZero = true
				case "ack-while-marked":
					s.cfg.Knobs.AckWhileMarked = true
				default:
					t.Fatalf("%s: unknown knob %q", td.Pos, k)
				}
			}
		}
		s.closeTable()
		s.tables++
		f, err := lockfsm.Open(filepath.Join(s.dir, fmt.Sprintf("locks%d.db", s.tables)), lockfsm.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		s.host, s.now, s.index, s.queued = &scriptHost{fsm: f}, t0, 0, nil
		s.e = New(s.cfg, s.host, s.now)
		fmt.Fprintf(&s.out, "engine started at %s with an empty lock table\n", ms(s.now))
	case "restart":
		s.e = New(s.cfg, s.host, s.now)
		s.queued = nil
		fmt.Fprintf(&s.out, "engine restarted at %s with %d sessions\n", ms(s.now), len(s.host.Sessions()))
	case "advance":
		s.now = s.now.Add(argMS(t, td, "ms", 0))
		fmt.Fprintf(&s.out, "now %s\n", ms(s.now))
	case "open":
		s.apply(lockfsm.Command{Kind: lockfsm.KindOpenSession, Node: scriptarg.Uint(t, td, "node", 0),
			TTLMillis: scriptarg.Uint(t, td, "ttl", 0)})
	case "acquire":
		c := lockfsm.Command{Kind: lockfsm.KindAcquire, Session: scriptarg.Uint(t, td, "s", 0), Seq: s.index + 1,
			Name: scriptarg.String(td, "name"), Owner: scriptarg.String(td, "owner"), Wait: td.HasArg("wait"),
			LeaseMillis: scriptarg.Uint(t, td, "lease", 0)}
		rwArgs(td, &c)
		s.apply(c)
	case "release":
		c := lockfsm.Command{Kind: lockfsm.KindRelease, Session: scriptarg.Uint(t, td, "s", 0), Seq: s.index + 1,
			Name: scriptarg.String(td, "name"), Owner: scriptarg.String(td, "owner")}
		rwArgs(td, &c)
		s.apply(c)
	case "expire":
		s.apply(lockfsm.Command{Kind: lockfsm.KindExpireSession, Session: scriptarg.Uint(t, td, "s", 0),
			LockDelayMillis: scriptarg.Uint(t, td, "delay", 0)})
	case "checkpoint":
		c := lockfsm.Command{Kind: lockfsm.KindCheckpoint, Token: scriptarg.Uint(t, td, "term", 0), Seq: scriptarg.Uint(t, td, "seq", 0)}
		for _, id := range scriptarg.Uints(t, td, "silent") {
			c.Checkpoints = append(c.Checkpoints, lockfsm.Checkpoint{Session: id, SilenceMillis: scriptarg.Uint(t, td, "silence", 0)})
		}
		for _, id := range scriptarg.Uints(t, td, "live") {
			c.Checkpoints = append(c.Checkpoints, lockfsm.Checkpoint{Session: id, Live: true})
		}
		s.apply(c)
	case "lead":
		voters := scriptarg.Uints(t, td, "voters")
		if voters == nil {
			voters = []uint64{s.cfg.Self}
		}
		s.e.BecomeLeader(scriptarg.Uint(t, td, "term", 0), &raftpb.ConfState{Voters: voters})
		fmt.Fprintf(&s.out, "leader of term %d\n", s.e.Term())
	case "ready":
		cmds, round := s.e.Ready(s.now)
		if round {
			s.out.WriteString("report round\n")
		}
		s.propose(cmds)
	case "stepdown":
		s.e.StepDown()
	case "tick":
		s.propose(s.e.Tick(s.now))
	case "follower-expiry":
		s.propose(s.e.FollowerExpiry(s.now, scriptarg.Uint(t, td, "own", 0)))
	case "drop":
		fmt.Fprintf(&s.out, "dropped %d proposals\n", len(s.queued))
		s.queued = nil
	case "ext":
		ext := s.e.HeartbeatExt(scriptarg.Uints(t, td, "sessions"))
		if ext == nil {
			s.out.WriteString("no extension\n")
			break
		}
		flags, ids, ok := parseHeartbeatExt(append(make([]byte, hbPosLen), ext...))
		fmt.Fprintf(&s.out, "extension ok=%v reports=%v sessions=%v\n", ok, flags&roundWantsReport != 0, ids)
	case "commit":
		q := s.queued
		s.queued = nil
		for _, c := range q {
			s.apply(c)
		}
	case "keepalive":
		id := scriptarg.Uint(t, td, "s", 0)
		recv := s.now.Add(-argMS(t, td, "ago", 0))
		s.e.NoteArrival(id, recv)
		if s.e.leader {
			s.e.SeeRound(s.e.Term(), []uint64{id}, s.now) // its round, issued and answered now
		}
		s.e.Keepalive(Keepalive{Session: id, Recv: recv, Reply: s.reply(id)})
		s.propose(s.e.FlushRevives(s.now))
	case "renew":
		st := s.e.Renew(scriptarg.String(td, "name"), scriptarg.Uint(t, td, "token", 0), scriptarg.Uint(t, td, "s", 0), scriptarg.String(td, "owner"),
			s.now.Add(-argMS(t, td, "ago", 0)))
		fmt.Fprintf(&s.out, "renew %v\n", st)
	case "heartbeat":
		pos := make([]byte, hbPosLen)
		m := &raftpb.Message{Type: raftpb.MessageType_MsgHeartbeat.Enum(), Term: proto.Uint64(scriptarg.Uint(t, td, "term", 0)),
			Context: appendHeartbeatExt(pos, td.HasArg("report"), scriptarg.Uints(t, td, "sessions"))}
		s.e.SeeLeader(m, s.now)
		resp := &raftpb.Message{Type: raftpb.MessageType_MsgHeartbeatResp.Enum(), Term: m.Term, Context: m.Context}
		s.e.AnswerHeartbeat(resp, s.now)
		if r, ok := decodeReport(resp.GetContext()[hbPosLen:], s.now, 0); ok {
			fmt.Fprintf(&s.out, "answered with a report: %s\n", fmtReport(r))
		} else {
			fmt.Fprintf(&s.out, "answered with %d bytes\n", len(resp.GetContext()))
		}
	case "report":
		s.takeReport(t, td)
	case "near":
		fmt.Fprintf(&s.out, "%v\n", s.e.DeadlineBefore(s.now.Add(argMS(t, td, "ms", 0))))
	case "gate":
		s.host.older = td.HasArg("older")
		fmt.Fprintf(&s.out, "older member known: %v\n", s.host.older)
	case "state":
		s.dumpState()
	case "memory":
		s.dumpMemory()
	default:
		t.Fatalf("%s: unknown command %q", td.Pos, td.Cmd)
	}
	for _, r := range s.replies {
		s.out.WriteString(r + "\n")
	}
	if s.out.Len() == 0 {
		return "ok\n"
	}
	return s.out.String()
}

// apply applies c as the next entry now and hands the engine what the node
// would: the lift or checkpoint, then every event.
func (s *scriptEnv) apply(c lockfsm.Command) {
	s.index++
	res, evs := s.host.fsm.ApplyCommand(s.index, &c, nil)
	switch c.Kind {
	case lockfsm.KindLiftDelay:
		s.e.OnLiftDelay(&c)
	case lockfsm.KindCheckpoint:
		s.e.OnCheckpoint(&c, s.now)
	}
	fmt.Fprintf(&s.out, "%d: %s → %s\n", s.index, fmtCommand(c), fmtResult(res))
	for i := range evs {
		s.e.OnEvent(&evs[i], s.now)
		fmt.Fprintf(&s.out, "  %s\n", fmtEvent(evs[i]))
	}
}

func (s *scriptEnv) propose(cmds []lockfsm.Command) {
	for _, c := range cmds {
		fmt.Fprintf(&s.out, "propose %s\n", fmtCommand(c))
	}
	s.queued = append(s.queued, cmds...)
}

// takeReport builds a follower's report, as its engine would, and hands it
// to this leader in the answer to a heartbeat.
func (s *scriptEnv) takeReport(t *testing.T, td *datadriven.TestData) {
	term := s.e.Term()
	var c contactLog
	c.init(s.now.Add(-argMS(t, td, "start", 3_600_000)))
	if td.HasArg("any") {
		c.any.record(term-1, s.now.Add(-argMS(t, td, "any", 0)))
	}
	seen := s.argAgo(t, td, "seen")
	for _, id := range sortedIDs(seen) {
		c.see(term-1, []uint64{id}, seen[id])
	}
	rep := c.appendReport(make([]byte, hbPosLen), term, s.now, s.argAgo(t, td, "opened"))
	m := &raftpb.Message{Type: raftpb.MessageType_MsgHeartbeatResp.Enum(), From: proto.Uint64(scriptarg.Uint(t, td, "from", 0)),
		Term: proto.Uint64(term), Context: rep}
	s.e.TakeReport(m, s.now)
	fmt.Fprintf(&s.out, "report from %d taken; context cut to %d bytes\n", m.GetFrom(), len(m.GetContext()))
}

func (s *scriptEnv) dumpState() {
	l := &s.e.lead
	fmt.Fprintf(&s.out, "leader=%v active=%v term=%d ready=%s\n", s.e.leader, l.active, l.term, ms(l.readyAt))
	if r := &l.reports; r.wanted || len(r.got) > 0 {
		got := sortedIDs(r.got)
		fmt.Fprintf(&s.out, "reports wanted=%v pending=%v need=%d got=%v\n", r.wanted, r.pending, r.need, got)
	}
	for _, id := range sortedIDs(l.sessions) {
		t := l.sessions[id]
		fmt.Fprintf(&s.out, "session %d base=%s at=%s ck=%v", id, ms(t.base), ms(t.at), t.ck)
		if t.ck == ckMine {
			fmt.Fprintf(&s.out, " ck-base=%s", ms(t.ckBase))
		}
		if len(t.parked) > 0 {
			fmt.Fprintf(&s.out, " parked=%d", len(t.parked))
		}
		if !t.proposedAt.IsZero() {
			fmt.Fprintf(&s.out, " expiring")
		}
		s.out.WriteString("\n")
	}
	keys := slices.SortedFunc(func(yield func(leaseKey) bool) {
		for k := range l.leases {
			if !yield(k) {
				return
			}
		}
	}, compareLeaseKeys)
	for _, k := range keys {
		for _, d := range l.leases[k] {
			fmt.Fprintf(&s.out, "lease %s token=%d s=%d owner=%s at=%s", k.name, k.token, d.session, d.owner, ms(d.at))
			if d.inherited {
				s.out.WriteString(" inherited")
			}
			s.out.WriteString("\n")
		}
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range l.delays {
			if !yield(n) {
				return
			}
		}
	})
	for _, n := range names {
		fmt.Fprintf(&s.out, "delay %s token=%d at=%s\n", n, l.delays[n].token, ms(l.delays[n].at))
	}
}

func (s *scriptEnv) dumpMemory() {
	for _, id := range sortedIDs(s.e.opened) {
		fmt.Fprintf(&s.out, "opened %d at=%s\n", id, ms(s.e.opened[id]))
	}
	for _, id := range sortedIDs(s.e.marks) {
		fmt.Fprintf(&s.out, "mark %d base=%s\n", id, ms(s.e.marks[id]))
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range s.e.delayed {
			if !yield(n) {
				return
			}
		}
	})
	for _, n := range names {
		fmt.Fprintf(&s.out, "delayed %s token=%d at=%s\n", n, s.e.delayed[n].token, ms(s.e.delayed[n].at))
	}
	for _, id := range sortedIDs(s.e.seen.sessions) {
		tt := s.e.seen.sessions[id]
		fmt.Fprintf(&s.out, "seen %d term=%d at=%s before=%s\n", id, tt.term, ms(tt.at), ms(tt.before))
	}
}

func fmtReport(r *memberReport) string {
	var parts []string
	parts = append(parts, "any="+ms(r.any), "start="+ms(r.start))
	for _, id := range sortedIDs(r.sessions) {
		parts = append(parts, fmt.Sprintf("seen[%d]=%s", id, ms(r.sessions[id])))
	}
	for _, id := range sortedIDs(r.opened) {
		parts = append(parts, fmt.Sprintf("opened[%d]=%s", id, ms(r.opened[id])))
	}
	return strings.Join(parts, " ")
}

// fields is a line of output: "k=v" pairs, of which zero values are left
// out.
type fields []string

func (f *fields) num(k string, v uint64) {
	if v != 0 {
		*f = append(*f, fmt.Sprintf("%s=%d", k, v))
	}
}

func (f *fields) str(k, v string) {
	if v != "" {
		*f = append(*f, k+"="+v)
	}
}

func (f fields) String() string { return strings.Join(f, " ") }

func fmtCommand(c lockfsm.Command) string {
	f := fields{c.Kind.String()}
	f.str("name", c.Name)
	f.num("s", c.Session)
	f.str("owner", c.Owner)
	f.num("node", c.Node)
	f.num("token", c.Token)
	f.num("seq", c.Seq)
	f.num("ttl", c.TTLMillis)
	f.num("lease", c.LeaseMillis)
	f.num("delay", c.LockDelayMillis)
	for _, m := range c.Checkpoints {
		if m.Live {
			f = append(f, fmt.Sprintf("%d:live", m.Session))
		} else {
			f = append(f, fmt.Sprintf("%d:silent=%dms", m.Session, m.SilenceMillis))
		}
	}
	return f.String()
}

func fmtResult(r lockfsm.Result) string {
	var f fields
	if r.Err != nil {
		f.str("err", strings.TrimPrefix(r.Err.Error(), "lockfsm: "))
	}
	f = append(f, r.Status.String())
	f.num("token", r.Token)
	return f.String()
}

func fmtEvent(x lockfsm.Event) string {
	f := fields{x.Kind.String()}
	f.str("name", x.Name)
	f.num("s", x.Session)
	f.str("owner", x.Owner)
	f.num("token", x.Token)
	f.num("lease", x.LeaseMillis)
	f.num("ttl", x.TTLMillis)
	f.num("delay", x.DelayMillis)
	if x.Reason != lockfsm.ReasonNone {
		f.str("reason", x.Reason.String())
	}
	return f.String()
}
