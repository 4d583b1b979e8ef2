package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lockraft/lockraft/node"
)

// Fault kinds of the multi-process mode (RunProcs).
const (
	ProcKill      = "kill"      // kill -9 a node process (the leader half the time), restart it from its data dir
	ProcStop      = "stop"      // SIGSTOP a node process, SIGCONT later
	ProcPartition = "partition" // isolate one node process's network namespace (needs ip netns)
)

// ProcsConfig is one multi-process run.
type ProcsConfig struct {
	Seed     uint64
	Duration time.Duration
	Faults   []string // kill, stop, partition
	Size     int      // default 3
	Clients  int      // per node process, default 3
	BaseDir  string   // default a temp dir, removed afterwards
	Exe      string   // binary that runs MaybeChild first (default os.Executable)
	Logf     func(string, ...any)
	// CheckTimeout bounds porcupine (default 60 s).
	CheckTimeout time.Duration
	// ExtraProbeSlack widens the L3 bound the leader-churn probes are judged
	// against (TTL + 5 ticks + 2 keepalive intervals after the leaderless
	// time): tests under the race detector on a loaded machine, where the
	// bound's "few round trips" take longer. The soak command leaves it 0.
	ExtraProbeSlack time.Duration
}

type proc struct {
	id      uint64
	inc     int
	cmd     *exec.Cmd
	done    chan struct{} // stdout EOF and process reaped
	idle    chan struct{} // clients stopped and their events written
	stopped bool
	dead    bool
}

type procRun struct {
	cfg     ProcsConfig
	exe     string
	base    string
	epoch   time.Time
	addrs   map[uint64]string
	members string
	netns   *netnsLab
	Applied *AppliedLog
	Store   *FencedStore

	mu    sync.Mutex
	procs map[uint64]*proc
	ops   map[string]*Op
	order []*Op
	secs  map[string]*procSection
	// probeFailed: leader-churn probe waiters whose wait ended in an error
	probeFailed map[string]string
	// gossip: slot -> gossip address, in gossip mode (rolling restarts)
	gossip map[uint64]string
}

type procSection struct {
	sec  *Section
	p    *proc
	lost bool
}

// RunProcs runs the workload against separate node processes with real
// kill -9, SIGSTOP/SIGCONT and (where ip netns works) partitions, then runs
// the same checks as Run.
func RunProcs(ctx context.Context, pc ProcsConfig) (*Report, error) {
	churn := slices.Contains(pc.Faults, ProcLeaderChurn)
	pc.Size = runSize(pc.Size, churn)
	if churn && (len(pc.Faults) != 1 || pc.Size < 5) {
		return nil, fmt.Errorf("fault %q runs on its own, on 5 node processes or more", ProcLeaderChurn)
	}
	if pc.Clients == 0 {
		pc.Clients = 3
	}
	if pc.Logf == nil {
		pc.Logf = func(string, ...any) {}
	}
	if pc.CheckTimeout == 0 {
		pc.CheckTimeout = 60 * time.Second
	}
	if pc.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		pc.Exe = exe
	}
	remove, err := tempBase(&pc.BaseDir, "chaos-procs-")
	if err != nil {
		return nil, err
	}
	defer remove()
	r := &procRun{cfg: pc, exe: pc.Exe, base: pc.BaseDir, epoch: time.Now(), addrs: map[uint64]string{},
		Applied: NewAppliedLog(), Store: NewFencedStore(), procs: map[uint64]*proc{}, ops: map[string]*Op{},
		secs: map[string]*procSection{}, probeFailed: map[string]string{}}
	rep := &Report{Seed: pc.Seed, Faults: strings.Join(pc.Faults, ","), Injected: map[string]int{}}
	viol := func(f string, a ...any) { rep.Violations = append(rep.Violations, fmt.Sprintf(f, a...)) }

	ids := make([]uint64, pc.Size)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	if slices.Contains(pc.Faults, ProcPartition) || churn {
		lab, err := newNetnsLab(pc.Seed, pc.Size)
		if err != nil {
			msg := "skipping netns partitions: " + err.Error()
			pc.Logf("%s", msg)
			fmt.Fprintln(os.Stderr, msg)
			rep.Notes = append(rep.Notes, msg)
			pc.Faults = slices.DeleteFunc(slices.Clone(pc.Faults), func(k string) bool { return k == ProcPartition })
			if churn {
				pc.Faults = []string{ProcLeaderChurn} // kills only: a waiter that leads is spared
			}
		} else {
			r.netns = lab
			defer lab.Close()
			for _, id := range ids {
				r.addrs[id] = lab.Addr(id)
			}
		}
	}
	if r.netns == nil {
		for _, id := range ids {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:0", id+1))
			if err != nil {
				return nil, err
			}
			r.addrs[id] = ln.Addr().String()
			ln.Close()
		}
	}
	var ms []string
	for _, id := range ids {
		ms = append(ms, fmt.Sprintf("%d=%s", id, r.addrs[id]))
	}
	r.members = strings.Join(ms, ",")
	rollingRun := slices.Equal(pc.Faults, []string{ProcRolling})
	if rollingRun {
		if err := r.gossipSetup(); err != nil {
			return nil, err
		}
	}

	// The parent's endpoint: the fencing store, on a unix socket (reachable
	// from every network namespace).
	sock := filepath.Join(r.base, "parent.sock")
	sln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(r.serveFence)}
	go srv.Serve(sln)
	defer srv.Close()

	defer r.killAll()
	for _, id := range ids {
		if err := r.start(id, false); err != nil {
			return nil, err
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	_, err = r.waitLeader(wctx)
	wcancel()
	if err != nil {
		return nil, err
	}
	pc.Logf("seed %d: %d node processes on %v, faults %v, %v", pc.Seed, pc.Size, r.addrs, pc.Faults, pc.Duration)

	runCtx, cancel := context.WithTimeout(ctx, pc.Duration)
	defer cancel()
	var probes []*probeResult
	var restarts []restartProbe
	var windows []rollingWindow
	switch {
	case churn:
		probes = r.leaderChurn(runCtx, rand.New(rand.NewPCG(pc.Seed, 0x9c0c)), rep.Injected)
	case slices.Equal(pc.Faults, []string{ProcRestartHolder}):
		restarts = r.restartHolder(runCtx, rand.New(rand.NewPCG(pc.Seed, 0x9c0c)), rep.Injected)
	case rollingRun:
		windows = r.rolling(runCtx, rep.Injected, viol)
	case len(pc.Faults) > 0:
		r.schedule(runCtx, rand.New(rand.NewPCG(pc.Seed, 0x9c0c)), rep.Injected)
	default:
		<-runCtx.Done()
	}
	end := time.Since(r.epoch).Nanoseconds()

	// Settle: heal, continue, restart the dead; stop every client.
	if r.netns != nil {
		r.netns.HealAll()
	}
	for _, id := range ids {
		r.cont(id)
		if r.isDead(id) {
			if err := r.start(id, false); err != nil {
				return nil, err
			}
		}
	}
	for _, id := range ids {
		r.stopClients(ctx, id)
	}
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if _, err := r.waitLeader(sctx); err != nil {
		viol("no leader after healing: %v", err)
	}
	r.probe().checkSettled(sctx, "", viol)

	// Durability: kill -9 every process, wipe one lock table, restart all
	// (without clients) and compare.
	replay := ids[int(pc.Seed%uint64(len(ids)))]
	r.killAll()
	if err := os.Remove(filepath.Join(r.dir(replay), "locks.db")); err != nil {
		viol("wipe n%d: %v", replay, err)
	}
	r.mu.Lock()
	r.Applied.Watch(replay, r.procs[replay].inc+1)
	r.mu.Unlock()
	for _, id := range ids {
		if err := r.start(id, true); err != nil {
			return nil, err
		}
	}
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	if _, err := r.waitLeader(dctx); err != nil {
		viol("no leader after full restart: %v", err)
	}
	r.probe().checkSettled(dctx, "after full restart", viol)
	dcancel()
	r.killAll() // and read every event to EOF

	ops := r.history()
	lost := 0
	for _, op := range ops {
		if op.Kind != OpUnlock && op.Outcome == OK && !r.Applied.WatchedSaw(op.Token) {
			if lost++; lost <= 5 {
				viol("S3: acknowledged grant %s/%s token %d not replayed by n%d from its log", op.Name, op.Owner, op.Token, replay)
			}
		}
	}
	finishReport(rep, ops, end, nil, r.Applied, r.Store, RunConfig{Seed: pc.Seed, Faults: pc.Faults, CheckTimeout: pc.CheckTimeout}, viol)
	var cfg node.Config
	FastConfig(&cfg)
	if churn {
		probeVerdicts(probes, cfg.SessionTTL, 5*cfg.TickInterval+2*cfg.KeepaliveInterval+pc.ExtraProbeSlack, viol,
			func(s string) { rep.Notes = append(rep.Notes, s) })
	}
	restartVerdicts(restarts, cfg.SessionTTL, viol, func(s string) { rep.Notes = append(rep.Notes, s) })
	if rollingRun {
		rollingVerdicts(ops, windows, viol, func(s string) { rep.Notes = append(rep.Notes, s) })
	}
	return rep, nil
}

func (r *procRun) dir(id uint64) string { return filepath.Join(r.base, fmt.Sprintf("n%d", id)) }
func (r *procRun) ctl(id uint64) string {
	return filepath.Join(r.base, fmt.Sprintf("ctl-n%d.sock", id))
}

// start (re)starts node process id from its data directory.
func (r *procRun) start(id uint64, noClients bool) error {
	r.mu.Lock()
	inc := 1
	if old := r.procs[id]; old != nil {
		inc = old.inc + 1
	}
	r.mu.Unlock()
	args := []string{ChildFlag, "-id", fmt.Sprint(id), "-inc", fmt.Sprint(inc), "-members", r.members,
		"-dir", r.dir(id), "-parent", filepath.Join(r.base, "parent.sock"), "-ctl", r.ctl(id),
		"-clients", fmt.Sprint(r.cfg.Clients), "-seed", fmt.Sprint(r.cfg.Seed), "-epoch", fmt.Sprint(r.epoch.UnixNano())}
	if noClients {
		args = append(args, "-noclients")
	}
	args = append(args, r.gossipArgs(id)...)
	var cmd *exec.Cmd
	if r.netns != nil {
		// ip netns exec execs the binary: the pid is the node process's.
		cmd = exec.Command("ip", append([]string{"netns", "exec", r.netns.NS(id), r.exe}, args...)...)
	} else {
		cmd = exec.Command(r.exe, args...)
	}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &proc{id: id, inc: inc, cmd: cmd, done: make(chan struct{}), idle: make(chan struct{})}
	hello := make(chan struct{})
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		helloed, idled := false, false
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) != nil {
				continue
			}
			switch e.T {
			case "hello":
				if !helloed {
					helloed = true
					close(hello)
				}
			case "idle":
				if !idled {
					idled = true
					close(p.idle)
				}
			default:
				r.onEvent(p, e)
			}
		}
		cmd.Wait()
		r.mu.Lock()
		p.dead = true
		r.mu.Unlock()
		if !helloed {
			close(hello)
		}
		if !idled {
			close(p.idle)
		}
	}()
	r.mu.Lock()
	r.procs[id] = p
	r.mu.Unlock()
	select {
	case <-hello:
	case <-time.After(20 * time.Second):
		return fmt.Errorf("node process %d did not start", id)
	}
	if r.isDead(id) {
		return fmt.Errorf("node process %d exited at start", id)
	}
	r.cfg.Logf("started n%d (pid %d, incarnation %d)", id, cmd.Process.Pid, inc)
	return nil
}

func (r *procRun) onEvent(p *proc, e event) {
	key := fmt.Sprintf("%d/%d/%d", p.id, p.inc, e.K)
	switch e.T {
	case "apply":
		r.Applied.ObserveDigest(p.id, p.inc, e.Index, e.Digest, e.Grants, e.Life)
	case "probe-failed":
		r.mu.Lock()
		r.probeFailed[e.Owner] = e.Err
		r.mu.Unlock()
	case "begin":
		r.mu.Lock()
		op := &Op{Client: e.Client, Node: p.id, Kind: e.Kind, Name: e.Name, Owner: e.Owner, Start: e.Time, HeldFrom: e.Held}
		r.ops[key] = op
		r.order = append(r.order, op)
		r.mu.Unlock()
	case "end":
		r.mu.Lock()
		if op := r.ops[key]; op != nil {
			op.End, op.Outcome, op.Token, op.Err = e.Time, e.Out, e.Token, e.Err
		}
		r.mu.Unlock()
	}
}

func (r *procRun) history() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Op, 0, len(r.order))
	released := map[string]bool{}
	for _, op := range r.order {
		if op.Kind == OpUnlock {
			released[op.Owner] = true
		}
	}
	for _, op := range r.order {
		out = append(out, *op)
		// kill -9 took the client with it: its hold ends at some unknown
		// moment after the grant (session expiry or the restart closing the
		// old session), as an Unlock whose outcome is unknown.
		if op.Kind != OpUnlock && op.Outcome == OK && !released[op.Owner] {
			out = append(out, Op{Client: op.Client, Node: op.Node, Kind: OpUnlock, Name: op.Name, Owner: op.Owner,
				Start: op.End, HeldFrom: op.End, Outcome: Unknown, Token: op.Token})
		}
	}
	for i := range out {
		out[i].ID = i
	}
	return out
}

func (r *procRun) serveFence(w http.ResponseWriter, req *http.Request) {
	var f fenceReq
	if err := json.NewDecoder(req.Body).Decode(&f); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	ok := true
	r.mu.Lock()
	ps := r.secs[f.Sec]
	r.mu.Unlock()
	switch f.Op {
	case "enter":
		var id, inc uint64
		fmt.Sscanf(f.Sec, "%d/%d/", &id, &inc)
		r.mu.Lock()
		ps = &procSection{p: r.procs[id]}
		r.secs[f.Sec] = ps
		r.mu.Unlock()
		ps.sec = r.Store.Enter(f.Name, f.Owner, f.Token, func() bool {
			// called under the store's lock
			r.mu.Lock()
			defer r.mu.Unlock()
			return !ps.lost && !ps.p.dead && !ps.p.stopped
		})
	case "write":
		if ps != nil {
			ok = r.Store.Write(ps.sec)
		}
	case "lost":
		if ps != nil {
			r.mu.Lock()
			ps.lost = true
			r.mu.Unlock()
		}
	case "exit":
		if ps != nil {
			r.Store.Exit(ps.sec)
			r.mu.Lock()
			delete(r.secs, f.Sec)
			r.mu.Unlock()
		}
	}
	json.NewEncoder(w).Encode(ok)
}

func (r *procRun) proc(id uint64) *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.procs[id]
}

func (r *procRun) isDead(id uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.procs[id]
	return p == nil || p.dead
}

// kill sends SIGKILL and waits until the process is reaped and its output
// read.
func (r *procRun) kill(id uint64) {
	p := r.proc(id)
	if p == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	r.mu.Lock()
	p.stopped = false
	r.mu.Unlock()
}

func (r *procRun) killAll() {
	r.mu.Lock()
	var ids []uint64
	for id := range r.procs {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	for _, id := range ids {
		r.kill(id)
	}
}

func (r *procRun) stop(id uint64) {
	p := r.proc(id)
	r.mu.Lock()
	p.stopped = true
	r.mu.Unlock()
	p.cmd.Process.Signal(syscall.SIGSTOP)
}

func (r *procRun) cont(id uint64) {
	p := r.proc(id)
	if p == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGCONT)
	r.mu.Lock()
	p.stopped = false
	r.mu.Unlock()
}

func (r *procRun) get(ctx context.Context, id uint64, path string, v any) error {
	cl := unixClient(r.ctl(id))
	defer cl.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://node"+path, nil)
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(b.String()))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func (r *procRun) stopClients(ctx context.Context, id uint64) {
	var ok bool
	qctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := r.get(qctx, id, "/stop", &ok); err != nil {
		r.cfg.Logf("stop clients n%d: %v", id, err)
	}
	select {
	case <-r.proc(id).idle:
	case <-qctx.Done():
	}
}

func (r *procRun) ids() []uint64 {
	out := make([]uint64, r.cfg.Size)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}

func (r *procRun) leader(ctx context.Context, id uint64) uint64 {
	var l uint64
	qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if r.get(qctx, id, "/leader", &l) != nil {
		return 0
	}
	return l
}

// waitLeader waits until every node process agrees on a leader.
func (r *procRun) waitLeader(ctx context.Context) (uint64, error) {
	return waitAgreedLeader(ctx, 20*time.Millisecond, r.ids, func(id uint64) (uint64, bool) { return r.leader(ctx, id), true },
		func(uint64) bool { return true })
}

// probe reaches the node processes through their control sockets, each
// query bounded by 2 s.
func (r *procRun) probe() nodeProbe {
	return nodeProbe{
		ids: r.ids,
		leftovers: func(ctx context.Context, id uint64) []string {
			var l []string
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if err := r.get(qctx, id, "/leftovers", &l); err != nil {
				return []string{err.Error()}
			}
			return l
		},
		snapshot: func(ctx context.Context, id uint64) ([]byte, uint64, error) {
			var s snapResp
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			err := r.get(qctx, id, "/snapshot", &s)
			return s.B, s.Idx, err
		},
	}
}

// schedule injects one fault at a time until ctx ends.
func (r *procRun) schedule(ctx context.Context, rng *rand.Rand, applied map[string]int) {
	dur := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	ids := r.ids()
	pick := func() uint64 {
		if rng.IntN(2) == 0 {
			if l := r.leader(ctx, ids[rng.IntN(len(ids))]); l != 0 {
				return l
			}
		}
		return ids[rng.IntN(len(ids))]
	}
	for ctx.Err() == nil {
		sleepCtx(ctx, dur(200*time.Millisecond, time.Second))
		if ctx.Err() != nil {
			return
		}
		kind := r.cfg.Faults[rng.IntN(len(r.cfg.Faults))]
		hold := dur(300*time.Millisecond, 2500*time.Millisecond)
		id := pick()
		applied[kind]++
		switch kind {
		case ProcKill:
			r.cfg.Logf("kill -9 n%d", id)
			r.kill(id)
			sleepCtx(ctx, hold)
			if err := r.start(id, false); err != nil {
				r.cfg.Logf("restart n%d: %v", id, err)
			}
		case ProcStop:
			r.cfg.Logf("SIGSTOP n%d", id)
			r.stop(id)
			sleepCtx(ctx, hold)
			r.cont(id)
		case ProcPartition:
			r.cfg.Logf("isolate n%d (netns link down)", id)
			r.netns.Isolate(id)
			sleepCtx(ctx, hold)
			r.netns.HealAll()
		}
	}
}
