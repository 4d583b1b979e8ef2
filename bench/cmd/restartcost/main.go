// Command restartcost measures what restarting a replica costs when its raft
// log is long: how long the restarted process takes to serve again and how
// much memory it holds afterwards.
//
// For each raft log engine (the WAL, the default for a new data directory,
// and bbolt, chosen with Tuning.LogEngine) it forms a 3-member static
// cluster, each member its own OS process (a child of this command) on its
// own data directory, and writes lock traffic through the public API (Lock
// and Unlock by 64 callers on distinct names, spread over the members) until
// the traffic written to one member's raft log reaches each size asked for
// (-sizes, MB). At each size it restarts that member -runs times: Close (a
// rolling restart), a new process on the same data directory, and measures
//
//   - serving: from starting the new process to its first Lock granted
//     (Join, its new session, the Lock's commit), with Join's own share;
//   - RSS (VmRSS) right after that Lock, and again after -idle with no
//     traffic, with the Go heap in use at both moments.
//
// The traffic is counted in bytes appended to the member's WAL (segments
// that compaction deleted included); the bbolt engine gets the same number of
// Lock+Unlock pairs. The figures printed are the median and the range of the
// runs. Targets: serving within 1 s and RSS at most 40 MiB at every size.
//
//	go run ./cmd/restartcost                       # from bench/: 1, 10 and 100 MB, both engines
//	go run ./cmd/restartcost -sizes 1,60 -engines wal -runs 5
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/lockraft/lockraft/bench/internal/childproc"
	"io"
	"net"
	"net/http"
	httppprof "net/http/pprof"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockraft/lockraft"
)

var (
	flagSizes   = flag.String("sizes", "1,10,100", "raft log sizes to restart at: MB of lock traffic written to the member's log")
	flagEngines = flag.String("engines", "wal,bbolt", "raft log engines to measure (wal is the default for a new data directory)")
	flagRuns    = flag.Int("runs", 3, "restarts at each size")
	flagIdle    = flag.Duration("idle", 5*time.Second, "how long after serving again the second RSS is read")
	flagCallers = flag.Int("callers", 64, "concurrent callers writing the traffic, on distinct names")
	flagKeep    = flag.Bool("keep", false, "keep the data directories (printed) for a closer look")
	flagProfile = flag.String("profile", "", "write a CPU profile of each restart (start to first Lock) and a heap profile after -idle to this directory (diagnosis)")

	// Child mode (set by the parent).
	flagChild  = flag.Bool("child", false, "")
	flagDir    = flag.String("dir", "", "")
	flagListen = flag.String("listen", "", "")
	flagPeers  = flag.String("peers", "", "")
	flagEngine = flag.String("engine", "", "")
	flagCPU    = flag.String("cpuprofile", "", "")
)

func main() {
	flag.Parse()
	var err error
	if *flagChild {
		err = child()
	} else {
		err = parent()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "restartcost:", err)
		os.Exit(1)
	}
}

// ---- child: one replica ----

// child joins, says so ("UP <url>"), takes and releases one lock and says
// how long that took from its start ("SERVING <join> <lock>"), then serves
// /load, /stats and the admin handler until its stdin closes, and Closes.
func child() error {
	start := time.Now()
	if *flagCPU != "" {
		f, err := os.Create(*flagCPU)
		if err != nil {
			return err
		}
		pprof.StartCPUProfile(f)
	}
	n, err := lockraft.Join(strings.Split(*flagPeers, ","),
		lockraft.WithDataDir(*flagDir), lockraft.WithListenAddr(*flagListen),
		lockraft.WithClusterID("restartcost"), lockraft.WithTuning(lockraft.Tuning{LogEngine: *flagEngine}))
	if err != nil {
		return err
	}
	joined := time.Since(start)
	mux := http.NewServeMux()
	mux.Handle("/lockraft/", http.StripPrefix("/lockraft", n.AdminHandler()))
	mux.Handle("/debug/pprof/heap", httppprof.Handler("heap"))     // diagnosis: what the heap holds after a restart
	mux.Handle("/debug/pprof/allocs", httppprof.Handler("allocs")) // diagnosis: what the restart allocated
	mux.HandleFunc("/debug/pprof/profile", httppprof.Profile)
	mux.HandleFunc("/stats", func(w http.ResponseWriter, _ *http.Request) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		json.NewEncoder(w).Encode(map[string]uint64{"heap_inuse": ms.HeapInuse, "heap_alloc": ms.HeapAlloc,
			"heap_sys": ms.HeapSys, "heap_released": ms.HeapReleased, "sys": ms.Sys, "num_gc": uint64(ms.NumGC)})
	})
	mux.HandleFunc("/load", childproc.LoadHandler(n))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go http.Serve(ln, mux)
	fmt.Printf("UP http://%s\n", ln.Addr())

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	l, err := n.Lock(ctx, "restartcost/probe")
	if err == nil {
		served := time.Since(start)
		if *flagCPU != "" {
			pprof.StopCPUProfile()
		}
		fmt.Printf("SERVING %d %d\n", joined.Microseconds(), served.Microseconds())
		err = l.Unlock(ctx)
	}
	cancel()
	if err != nil {
		fmt.Printf("FAILED %v\n", err)
	}

	// The parent closes stdin to stop the child: a rolling restart's Close.
	io.Copy(io.Discard, os.Stdin)
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	return n.Close(cctx)
}

// ---- parent ----

type proc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	logf   *os.File
	url    string
	start  time.Time
	joined time.Duration // Join returned, from the child's start
	served time.Duration // first Lock granted, from cmd.Start
}

type cluster struct {
	self, engine string
	dirs, peers  []string
	procs        []*proc
}

// start runs member i, up to its UP line.
func (c *cluster) start(i int, extra ...string) (*proc, error) {
	cmd := exec.Command(c.self, append([]string{"-child", "-dir", c.dirs[i], "-listen", c.peers[i],
		"-peers", strings.Join(c.peers, ","), "-engine", c.engine}, extra...)...)
	logf, err := os.OpenFile(c.dirs[i]+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	out, _ := cmd.StdoutPipe()
	in, _ := cmd.StdinPipe()
	p := &proc{cmd: cmd, stdin: in, out: bufio.NewReader(out), logf: logf, start: time.Now()}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	c.procs[i] = p
	line, err := p.line("UP")
	if err != nil {
		return nil, fmt.Errorf("member %d: %w", i, err)
	}
	p.url = line[0]
	return p, nil
}

// line reads the child's next line, which must start with want, and returns
// its fields after that word.
func (p *proc) line(want string) ([]string, error) {
	line, err := p.out.ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) == 0 || f[0] != want {
		p.cmd.Wait()
		log, _ := os.ReadFile(p.logf.Name())
		if len(log) > 3000 {
			log = log[len(log)-3000:]
		}
		return nil, fmt.Errorf("wanted %s, got %q (%v); its log ends:\n%s", want, line, err, log)
	}
	return f[1:], nil
}

// serving waits for the child's first Lock.
func (p *proc) serving() error {
	f, err := p.line("SERVING")
	if err != nil {
		return err
	}
	p.served = time.Since(p.start)
	us, _ := strconv.ParseInt(f[0], 10, 64)
	p.joined = time.Duration(us) * time.Microsecond
	return nil
}

// stop closes the child's stdin (it Closes its node) and waits for it to exit.
func (p *proc) stop() error {
	p.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	defer p.logf.Close()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		return errors.New("did not exit within 30 s of its stdin closing; killed")
	}
}

func (c *cluster) stopAll() {
	for _, p := range c.procs {
		if p != nil {
			p.stdin.Close()
		}
	}
	for _, p := range c.procs {
		if p != nil {
			p.stop()
		}
	}
}

type result struct {
	engine       string
	sizeMB       int
	diskMB       float64 // the member's raft log on disk at the restart
	pairs        int     // Lock+Unlock pairs written to reach the size
	serving      []time.Duration
	join         []time.Duration
	rss0, rss1   []float64 // MiB
	heap0, heap1 []float64 // MiB, Go heap in use
}

func parent() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var sizes []int
	for _, s := range strings.Split(*flagSizes, ",") {
		mb, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || mb <= 0 {
			return fmt.Errorf("bad -sizes %q", *flagSizes)
		}
		sizes = append(sizes, mb)
	}
	slices.Sort(sizes)
	fmt.Printf("restartcost: sizes %v MB, %d restarts each, RSS again after %v; load average %s; %d CPUs\n",
		sizes, *flagRuns, *flagIdle, childproc.Loadavg(), runtime.NumCPU())
	var results []*result
	pairsAt := map[int]int{} // size → pairs the WAL run needed, for the engines without a byte count
	for _, engine := range strings.Split(*flagEngines, ",") {
		rs, err := measureEngine(self, strings.TrimSpace(engine), sizes, pairsAt)
		results = append(results, rs...)
		if err != nil {
			printTable(results)
			return fmt.Errorf("engine %s: %w", engine, err)
		}
	}
	printTable(results)
	fmt.Printf("load average at the end %s\n", childproc.Loadavg())
	return nil
}

func measureEngine(self, engine string, sizes []int, pairsAt map[int]int) ([]*result, error) {
	tmp, err := os.MkdirTemp("", "restartcost-")
	if err != nil {
		return nil, err
	}
	if *flagKeep {
		fmt.Println("data directories in", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	ports, err := childproc.FreePorts(3)
	if err != nil {
		return nil, err
	}
	c := &cluster{self: self, engine: engine, procs: make([]*proc, 3)}
	for i, port := range ports {
		c.dirs = append(c.dirs, filepath.Join(tmp, fmt.Sprint(i)))
		c.peers = append(c.peers, fmt.Sprintf("127.0.0.1:%d", port))
	}
	defer c.stopAll()
	for i := range c.procs {
		if _, err := c.start(i); err != nil {
			return nil, err
		}
	}
	for _, p := range c.procs {
		if err := p.serving(); err != nil {
			return nil, err
		}
	}

	const m = 2 // the member restarted
	wal := walBytes{seen: map[string]int64{}}
	logDir := filepath.Join(c.dirs[m], "wal")
	if engine == "bbolt" {
		logDir = filepath.Join(c.dirs[m], "raft.db")
	}
	for _, mb := range sizes {
		if _, ok := pairsAt[mb]; engine != "wal" && !ok {
			return nil, fmt.Errorf("the traffic of %d MB is calibrated on the WAL: list wal first in -engines", mb)
		}
	}
	var results []*result
	pairs, round := 0, 0
	for _, mb := range sizes {
		target := int64(mb) << 20
		// Traffic: rounds of a few thousand pairs over every member, until
		// the member's WAL has taken the size (or, for bbolt, as many pairs
		// as the WAL took).
		for {
			if engine == "wal" {
				if wal.update(logDir) >= target {
					break
				}
			} else if pairs >= pairsAt[mb] {
				break
			}
			n, err := c.load(round, 2048)
			if err != nil {
				return results, err
			}
			pairs += n
			round++
		}
		if engine == "wal" {
			pairsAt[mb] = pairs
		}
		r := &result{engine: engine, sizeMB: mb, pairs: pairs}
		results = append(results, r)
		for run := range *flagRuns {
			if err := c.procs[m].stop(); err != nil {
				return results, fmt.Errorf("stopping member %d: %w", m, err)
			}
			c.procs[m] = nil
			if engine == "wal" {
				wal.update(logDir)
			}
			if run == 0 {
				r.diskMB = float64(diskBytes(logDir)) / (1 << 20)
			}
			var extra []string
			prof := filepath.Join(*flagProfile, fmt.Sprintf("%s-%dMB-run%d", engine, mb, run+1))
			if *flagProfile != "" {
				extra = []string{"-cpuprofile", prof + "-cpu.pprof"}
			}
			p, err := c.start(m, extra...)
			if err != nil {
				return results, err
			}
			if err := p.serving(); err != nil {
				return results, err
			}
			pid := p.cmd.Process.Pid
			r.rss0 = append(r.rss0, float64(childproc.RSSKiB(pid))/1024)
			r.heap0 = append(r.heap0, heapMiB(p.url))
			r.serving = append(r.serving, p.served)
			r.join = append(r.join, p.joined)
			time.Sleep(*flagIdle) // the measurement window, not a wait for a condition
			r.rss1 = append(r.rss1, float64(childproc.RSSKiB(pid))/1024)
			r.heap1 = append(r.heap1, heapMiB(p.url))
			if *flagProfile != "" {
				_, body := childproc.Get(p.url+"/debug/pprof/heap", 10*time.Second)
				os.WriteFile(prof+"-heap.pprof", []byte(body), 0o644)
				_, body = childproc.Get(p.url+"/debug/pprof/allocs", 10*time.Second)
				os.WriteFile(prof+"-allocs.pprof", []byte(body), 0o644)
			}
			fmt.Printf("  %s %d MB (log on disk %.1f MB) run %d: serving %v (Join %v), RSS %.1f → %.1f MiB, heap %.1f → %.1f MiB\n",
				engine, mb, r.diskMB, run+1, p.served.Round(time.Millisecond), p.joined.Round(time.Millisecond),
				r.rss0[run], r.rss1[run], r.heap0[run], r.heap1[run])
		}
	}
	return results, nil
}

// load runs pairs Lock+Unlock pairs over every member's callers and returns
// how many were done.
func (c *cluster) load(round, pairs int) (int, error) {
	per := max(1, pairs / *flagCallers)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i, p := range c.procs {
		callers := *flagCallers / len(c.procs)
		if i < *flagCallers%len(c.procs) {
			callers++
		}
		wg.Go(func() {
			code, body := childproc.Get(fmt.Sprintf("%s/load?callers=%d&pairs=%d&prefix=m%d", p.url, callers, per, i), 6*time.Minute)
			var r map[string]int
			mu.Lock()
			defer mu.Unlock()
			if code != 200 || json.Unmarshal([]byte(body), &r) != nil {
				firstErr = cmp(firstErr, fmt.Errorf("load on member %d: %d %s", i, code, body))
			} else if r["errors"] > 0 {
				firstErr = cmp(firstErr, fmt.Errorf("load on member %d: %d Lock/Unlock errors", i, r["errors"]))
			}
		})
	}
	wg.Wait()
	return per * *flagCallers, firstErr
}

func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// walBytes counts the bytes appended to a WAL directory, segments deleted
// by compaction included: each segment at the largest size it was seen at.
// A segment stops growing when the next one starts, long before compaction
// deletes it, so polling between rounds of traffic sees its final size. A
// segment's size is up to its last non-zero byte: the WAL zero-fills
// ahead of its writes.
type walBytes struct{ seen map[string]int64 }

func (w *walBytes) update(dir string) int64 {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".wal") {
			w.seen[e.Name()] = max(w.seen[e.Name()], written(filepath.Join(dir, e.Name())))
		}
	}
	var sum int64
	for _, s := range w.seen {
		sum += s
	}
	return sum
}

// written is the offset after the last non-zero byte of a file.
func written(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	buf := make([]byte, 64<<10)
	for end := fi.Size(); end > 0; {
		off := max(0, end-int64(len(buf)))
		n, err := f.ReadAt(buf[:end-off], off)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0
		}
		for i := n - 1; i >= 0; i-- {
			if buf[i] != 0 {
				return off + int64(i) + 1
			}
		}
		end = off
	}
	return 0
}

// diskBytes is the size of a file, or what the segments of a WAL directory hold.
func diskBytes(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if !fi.IsDir() {
		return fi.Size()
	}
	var sum int64
	ents, _ := os.ReadDir(path)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".wal") {
			sum += written(filepath.Join(path, e.Name()))
		}
	}
	return sum
}

func printTable(rs []*result) {
	if len(rs) == 0 {
		return
	}
	fmt.Printf("\nmedian [min–max] of the restarts; targets: serving ≤ 1 s, RSS ≤ 40 MiB\n")
	fmt.Printf("%-6s %8s %9s %9s %22s %22s %20s %20s %16s\n", "engine", "log MB", "on disk", "pairs",
		"serving (ms)", "Join (ms)", "RSS at serving MiB", fmt.Sprintf("RSS after %v MiB", *flagIdle), "heap after MiB")
	for _, r := range rs {
		if len(r.serving) == 0 {
			continue
		}
		ms := func(ds []time.Duration) []float64 {
			var v []float64
			for _, d := range ds {
				v = append(v, float64(d.Microseconds())/1000)
			}
			return v
		}
		fmt.Printf("%-6s %8d %9.2f %9d %22s %22s %20s %20s %16s\n", r.engine, r.sizeMB, r.diskMB, r.pairs,
			spread(ms(r.serving), "%.0f"), spread(ms(r.join), "%.0f"), spread(r.rss0, "%.1f"), spread(r.rss1, "%.1f"), spread(r.heap1, "%.1f"))
	}
}

// spread formats the median and the range of v.
func spread(v []float64, f string) string {
	v = slices.Clone(v)
	slices.Sort(v)
	return fmt.Sprintf(f+" ["+f+"–"+f+"]", v[len(v)/2], v[0], v[len(v)-1])
}

func heapMiB(url string) float64 {
	var m map[string]uint64
	_, body := childproc.Get(url+"/stats", 5*time.Second)
	json.Unmarshal([]byte(body), &m)
	return float64(m["heap_inuse"]) / (1 << 20)
}
