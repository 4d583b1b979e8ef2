package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockraft/lockraft"
	"github.com/lockraft/lockraft/bench/internal/childproc"
)

// member is one replica: a child process with its data directory.
type member struct {
	id      int    // its raft id: its place in the static list
	label   string // its name's letter (name: label and id)
	dir     string
	listen  string // its gRPC address
	logPath string
	proc    *childproc.Proc
	url     string // its control endpoint
}

func (m *member) name() string { return fmt.Sprintf("%s%d", m.label, m.id) }

// cluster is the static list: the three replicas (children, ids 1-3), the
// load member (this process, id 4) and the new member (a child, id 5),
// started only when it is to receive the table.
type cluster struct {
	self  string // this executable
	base  string
	label string // the replicas' names' letter: r, or c for the control cluster
	peers []string
	quota int
	reps  []*member
	load  *lockraft.Node
	fresh *member

	loadLog *os.File // the load member's log
	stopped bool
}

func (c *cluster) newMember(id int) *member {
	name := fmt.Sprintf("%s%d", c.label, id)
	return &member{id: id, label: c.label, dir: filepath.Join(c.base, name), listen: c.peers[id-1],
		logPath: filepath.Join(c.base, name+".log")}
}

// form starts a cluster's three replicas and its load member (this
// process), waits until all serve, and makes a replica lead. Its data
// directories and logs go under base, named after label.
func form(ctx context.Context, self, base, label string, quota int) (*cluster, error) {
	ports, err := childproc.FreePorts(5)
	if err != nil {
		return nil, err
	}
	c := &cluster{self: self, base: base, label: label, quota: quota}
	for _, port := range ports {
		c.peers = append(c.peers, fmt.Sprintf("127.0.0.1:%d", port))
	}
	for id := 1; id <= 3; id++ {
		m := c.newMember(id)
		c.reps = append(c.reps, m)
		if err := c.start(m); err != nil {
			return c, err
		}
	}
	logf, err := os.Create(filepath.Join(base, label+"-load.log"))
	if err != nil {
		return c, err
	}
	c.loadLog = logf
	logger := slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if c.load, err = lockraft.Join(c.peers, memberOptions(filepath.Join(base, label+"-load"), c.peers[3], quota, logger)...); err != nil {
		return c, fmt.Errorf("load member: %w", err)
	}
	for _, m := range c.reps {
		if _, err := waitServing(ctx, m, 2*time.Minute); err != nil {
			return c, err
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = c.load.Ready(rctx)
	cancel()
	if err != nil {
		return c, fmt.Errorf("load member not ready: %w", err)
	}
	return c, c.replicaLeads(ctx)
}

// start runs replica m as a new process, up to its READY line (Join has
// returned and its control endpoint listens).
func (c *cluster) start(m *member, extra ...string) error {
	p, f, err := childproc.Start(m.logPath, "READY", c.self, append([]string{"-child", "-datadir", m.dir, "-listen", m.listen,
		"-peers", strings.Join(c.peers, ","), "-quota", strconv.Itoa(c.quota), "-endrun", strconv.Itoa(*flagEndRun)}, extra...)...)
	if err != nil {
		return fmt.Errorf("replica %s: %w", m.name(), err)
	}
	m.proc, m.url = p, f[0]
	return nil
}

// stop stops the replicas (each Closes its node) and then the load member.
// Once.
func (c *cluster) stop() {
	if c.stopped {
		return
	}
	c.stopped = true
	var ps []*childproc.Proc
	for _, m := range append(c.reps, c.fresh) {
		if m != nil && m.proc != nil {
			ps = append(ps, m.proc)
		}
	}
	childproc.StopAll(ps, 10*time.Second)
	if c.load != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		c.load.Close(ctx)
		cancel()
	}
	if c.loadLog != nil {
		_ = c.loadLog.Close()
	}
}

// leader is the replica that leads as the load member last saw it (nil: the
// load member itself, or none known).
func (c *cluster) leader() *member {
	id := int(c.load.LeaderID())
	if id >= 1 && id <= len(c.reps) {
		return c.reps[id-1]
	}
	return nil
}

// replicaLeads makes sure one of the measured replicas leads: leadership
// is handed from the load process to r1 if the load process holds it.
func (c *cluster) replicaLeads(ctx context.Context) error {
	if c.leader() != nil {
		return nil
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.load.TransferLeader(tctx, 1); err != nil {
		return fmt.Errorf("handing leadership from the load process to r1: %w", err)
	}
	for c.leader() == nil { // until the load process has learnt the new leader
		if err := sleep(tctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("handing leadership from the load process to r1: %w", err)
		}
	}
	return nil
}

// followers are the replicas that do not lead.
func (c *cluster) followers() []*member {
	l := c.leader()
	var fs []*member
	for _, m := range c.reps {
		if m != l {
			fs = append(fs, m)
		}
	}
	return fs
}

// waitServing polls m's /serving until its probe Lock+Unlock succeeded.
func waitServing(ctx context.Context, m *member, timeout time.Duration) (serving, error) {
	deadline := time.Now().Add(timeout)
	for {
		var sv serving
		code, body := childproc.Get(m.url+"/serving", 5*time.Second)
		if code == 200 && json.Unmarshal([]byte(body), &sv) == nil {
			if sv.LockUS > 0 {
				return sv, nil
			}
			if sv.Err != "" {
				return sv, fmt.Errorf("replica %s: its first Lock failed: %s", m.name(), sv.Err)
			}
		}
		if time.Now().After(deadline) {
			return sv, fmt.Errorf("replica %s not serving within %v; its log ends:\n%s", m.name(), timeout, childproc.LogTail(m.logPath, 2000))
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return sv, err
		}
	}
}

// status is m's lockraft status (a pass over its table: use sparingly).
func status(m *member) (lockraft.StatusView, error) {
	var st lockraft.StatusView
	code, body := childproc.Get(m.url+"/lockraft/status?timeout=60s", 65*time.Second)
	if code != 200 {
		return st, fmt.Errorf("replica %s status: %d %s", m.name(), code, body)
	}
	return st, json.Unmarshal([]byte(body), &st)
}

// memReading is a replica's figures as is and after a forced GC, and its
// data directory's size by top-level entry.
type memReading struct {
	asIs, gc childproc.Stats
	disk     map[string]int64
}

// readMemory reads every member of ms as is first, then each after a
// forced GC.
func readMemory(ms []*member) ([]memReading, error) {
	rs := make([]memReading, len(ms))
	var err error
	for i, m := range ms {
		if rs[i].asIs, err = childproc.FetchStats(m.url, false); err != nil {
			return nil, err
		}
	}
	for i, m := range ms {
		if rs[i].gc, err = childproc.FetchStats(m.url, true); err != nil {
			return nil, err
		}
		rs[i].disk = du(m.dir)
	}
	return rs, nil
}

// du is the size of dir's files by top-level entry, and "total".
func du(dir string) map[string]int64 {
	out := map[string]int64{}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		top, _, _ := strings.Cut(rel, string(filepath.Separator))
		out[top] += info.Size()
		out["total"] += info.Size()
		return nil
	})
	return out
}

// diskString prints a du result: the total, then each entry, largest first.
func diskString(d map[string]int64) string {
	var keys []string
	for k := range d {
		if k != "total" {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b string) int { return int(d[b] - d[a]) })
	parts := []string{fmt.Sprintf("%.1f MiB", mib(d["total"]))}
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, mib(d[k])))
	}
	return strings.Join(parts, ", ")
}

// largestFile is the size of the largest file under dir (0: none).
func largestFile(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n = max(n, info.Size())
			}
		}
		return nil
	})
	return n
}

func mib[T int64 | uint64 | float64](b T) float64 { return float64(b) / (1 << 20) }

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(d):
		return nil
	}
}

// lat is the p50, p99 and max of ds.
type lat struct{ p50, p99, max time.Duration }

func summarize(ds []time.Duration) lat {
	if len(ds) == 0 {
		return lat{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return lat{q(0.50), q(0.99), s[len(s)-1]}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d.Microseconds())/1000) }

func (l lat) String() string {
	return fmt.Sprintf("p50 %s ms  p99 %s ms  max %s ms", ms(l.p50), ms(l.p99), ms(l.max))
}

// repPairs runs count sequential Lock+Unlock pairs inside replica m.
func repPairs(m *member, prefix string, count int) ([]time.Duration, error) {
	code, body := childproc.Get(fmt.Sprintf("%s/pairs?n=%d&prefix=%s", m.url, count, prefix), 10*time.Minute)
	var rep pairsReply
	if code != 200 || json.Unmarshal([]byte(body), &rep) != nil {
		return nil, fmt.Errorf("replica %s pairs: %d %s", m.name(), code, body)
	}
	var ds []time.Duration
	for _, us := range rep.US {
		ds = append(ds, time.Duration(us)*time.Microsecond)
	}
	if rep.Errors > 0 {
		return ds, fmt.Errorf("replica %s: %d of %d pairs failed: %s", m.name(), rep.Errors, count, rep.Err)
	}
	return ds, nil
}

// memTotal is the machine's memory ("?" if unreadable).
func memTotal() string {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				kib, _ := strconv.ParseInt(f[0], 10, 64)
				return fmt.Sprintf("%.1f GiB", float64(kib)/(1<<20))
			}
		}
	}
	return "?"
}
