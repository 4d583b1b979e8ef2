// Command embedcost measures what embedding a lockraft replica costs the
// service that hosts it: each replica runs in its own OS process (a child of
// this command), as it would inside a real service, and is measured from
// outside and through a small control endpoint:
//
//   - idle CPU: % of one core over -idle (default 60 s) with no lock
//     traffic, from the process's own getrusage (user+system, µs);
//   - RSS (VmRSS), open file descriptors (/proc/PID/fd) and goroutines;
//   - CPU per Lock+Unlock pair under S2 (64 concurrent callers on distinct
//     names, spread over the members): every process's CPU together, divided
//     by the pairs done; and each process's CPU and heap allocations per
//     pair the cluster did (the leader's row is what its host pays).
//
// Fleets: "3" is a 3-member static cluster (the quick start); "3g" the same
// formed by gossip; "10" a gossip fleet of 10; "50" a gossip fleet of 50 (5
// voters, 2 learners — the default standbys, -learners sets how many — the
// rest light members). Production timings
// throughout (100 ms ticks, heartbeats every 200 ms, 10 s session TTL,
// keepalives every 2.5 s, memberlist's LAN timing with gossip every second).
// Two floors say what lockraft adds to what it stands on (floor.go): "7",
// 5 voters and 2 learners and no light member (a fleet's leader before any
// light member's keepalive), and "50m", 50 members of the gossip layer
// alone (a light member before lockraft's session).
//
//	go run ./cmd/embedcost                      # from bench/: fleets 3 and 50
//	go run ./cmd/embedcost -fleets 3g -idle 30s
//	go run ./cmd/embedcost -fleets 50m,7,50     # the floors beside the fleet
//	go run ./cmd/embedcost -fleets 3 -mtls      # mutual TLS between the members
//
// The machine's load average is printed with the figures: idle CPU is only
// meaningful on a quiet machine. A fleet of 50 gossips its full state
// (push/pull) once a minute per member, in waves after it starts: measure
// over a whole minute. -heartbeat-ticks, -gossip-interval, -probe-interval
// and -keepalive change those timings on every replica, to measure what
// they cost:
//
//	go run ./cmd/embedcost -fleets 10 -idle 30s -gossip-interval 1s
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/lockraft/lockraft/bench/internal/childproc"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lockraft/lockraft"
	"github.com/lockraft/lockraft/internal/certgen"
)

var (
	flagFleets  = flag.String("fleets", "3,50", "fleets to measure: 3 (static), 3g (gossip), 10 and 50 (gossip, 5 voters, -learners learners, the rest light); floors (floor.go): 7 (5 voters, 2 learners, no light), 50m (the gossip layer alone)")
	flagIdle    = flag.Duration("idle", 60*time.Second, "idle measurement window")
	flagSettle  = flag.Duration("settle", 10*time.Second, "wait after the fleet is formed and ready, before measuring")
	flagPairs   = flag.Int("pairs", 6400, "Lock+Unlock pairs of the S2 load (over all callers)")
	flagCallers = flag.Int("callers", 64, "concurrent callers of the S2 load, on distinct names")
	flagMTLS    = flag.Bool("mtls", false, "static fleets: mutual TLS between the members, each with a certificate naming it (as deployed off loopback)")
	flagTLS     = flag.String("tls", "", "")
	flagS2CPU   = flag.Duration("s2cpu", 0, "with -profile: also profile the leader's CPU over this much of the S2 load (make -pairs last longer)")
	flagMemRate = flag.Int("memprofilerate", 0, "with -profile: the children's runtime.MemProfileRate (1 counts every allocation; 0 keeps Go's default sampling)")
	flagProfile = flag.String("profile", "", "write CPU profiles of the leader and one member of each role over the idle window, and the leader's allocation profile before and after the S2 load, to this directory (diagnosis: profiling itself costs CPU, so the figures of such a run are not the cost)")

	// Child mode (set by the parent).
	flagChild  = flag.Bool("child", false, "")
	flagDir    = flag.String("dir", "", "")
	flagListen = flag.String("listen", "", "")
	flagPeers  = flag.String("peers", "", "")
	flagGossip = flag.Bool("gossip", false, "")
	flagSeeds  = flag.String("seeds", "", "")
	flagExpect = flag.Int("expect", 0, "")
	flagName   = flag.String("name", "", "")
	flagBare   = flag.Bool("bare", false, "")
	flagHB     = flag.Int("heartbeat-ticks", 0, "raft heartbeat interval in ticks (0: lockraft's default); for experiments")
	flagGI     = flag.Duration("gossip-interval", 0, "memberlist's gossip interval (0: LANGossipTiming's); for experiments")
	flagPI     = flag.Duration("probe-interval", 0, "memberlist's probe interval (0: LANGossipTiming's); for experiments")
	flagKA     = flag.Duration("keepalive", 0, "session keepalive interval (0: lockraft's default, TTL/4); for experiments")
	flagLearn  = flag.Int("learners", 2, "warm standby learners of a gossip fleet (VoterPolicy.MaxLearners; 0: none, the rest of the fleet light)")
)

func main() {
	flag.Parse()
	var err error
	if *flagProfile != "" && !*flagChild {
		if err := os.MkdirAll(*flagProfile, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if *flagChild && *flagBare {
		err = bareChild()
	} else if *flagChild {
		err = child()
	} else {
		err = parent()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedcost:", err)
		os.Exit(1)
	}
}

// ---- child: one replica ----

func child() error {
	if *flagMemRate > 0 {
		runtime.MemProfileRate = *flagMemRate
	}
	opts := []lockraft.Option{lockraft.WithDataDir(*flagDir), lockraft.WithClusterID(clusterID)}
	if *flagTLS != "" {
		f := strings.Split(*flagTLS, ",")
		opts = append(opts, lockraft.WithTLSFiles(f[0], f[1], f[2]))
	}
	if *flagHB > 0 || *flagKA > 0 {
		opts = append(opts, lockraft.WithTuning(lockraft.Tuning{HeartbeatTicks: *flagHB, KeepaliveInterval: *flagKA}))
	}
	var peers []string
	if *flagGossip {
		if *flagSeeds != "" {
			peers = strings.Split(*flagSeeds, ",")
		}
		var founders []string // the first expect members found the cluster
		for i := range *flagExpect {
			founders = append(founders, fmt.Sprintf("m%d", i))
		}
		timing := lockraft.LANGossipTiming()
		if *flagGI > 0 {
			timing.GossipInterval = *flagGI
		}
		if *flagPI > 0 {
			timing.ProbeInterval = *flagPI
		}
		opts = append(opts, lockraft.WithListenAddr(*flagListen), lockraft.WithGossip(lockraft.Gossip{
			Name: *flagName, Founders: founders, Timing: timing,
			Voters: lockraft.VoterPolicy{MaxVoters: 5, MaxLearners: maxLearners(*flagLearn), StabilizeFor: 2 * time.Second},
		}))
	} else {
		peers = strings.Split(*flagPeers, ",")
		opts = append(opts, lockraft.WithListenAddr(*flagListen))
	}
	n, err := lockraft.Join(peers, opts...)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/lockraft/", http.StripPrefix("/lockraft", n.AdminHandler()))
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)          // diagnosis: which goroutines wake an idle replica
	mux.Handle("/debug/pprof/allocs", pprof.Handler("allocs")) // diagnosis: what an idle replica allocates (GC cost)
	mux.HandleFunc("/stats", serveStats)
	mux.HandleFunc("/load", childproc.LoadHandler(n))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("READY http://%s %s\n", ln.Addr(), n.GossipAddr())
	go http.Serve(ln, mux)
	// The parent closes stdin to stop the child.
	io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n.Close(ctx)
	return nil
}

// serveStats is a child's /stats: its goroutines, its CPU time and its heap
// allocations so far.
func serveStats(w http.ResponseWriter, _ *http.Request) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	json.NewEncoder(w).Encode(map[string]int64{"goroutines": int64(runtime.NumGoroutine()), "cpu_us": selfCPU().Microseconds(), "mallocs": int64(ms.Mallocs)})
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ---- parent ----

type proc struct {
	*childproc.Proc
	url  string
	role string
}

func parent() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for _, f := range strings.Split(*flagFleets, ",") {
		if err := measureFleet(self, strings.TrimSpace(f)); err != nil {
			return fmt.Errorf("fleet %s: %w", f, err)
		}
	}
	return nil
}

func measureFleet(self, kind string) error {
	size, gossip, bare := 0, false, false
	switch kind {
	case "7":
		size, gossip = 7, true
	case "50m":
		size, gossip, bare = 50, true, true
	case "3":
		size = 3
	case "3g":
		size, gossip = 3, true
	case "10":
		size, gossip = 10, true
	case "50":
		size, gossip = 50, true
	default:
		return fmt.Errorf("unknown fleet %q", kind)
	}
	tmp, err := os.MkdirTemp("", "embedcost-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// Static members need their raft addresses in advance; gossip members
	// bind free ports and the first one's gossip address is everyone's seed.
	peers := make([]string, size)
	if gossip {
		for i := range peers {
			peers[i] = "127.0.0.1:0"
		}
	} else {
		ports, err := childproc.FreePorts(size)
		if err != nil {
			return err
		}
		for i, p := range ports {
			peers[i] = fmt.Sprintf("127.0.0.1:%d", p)
		}
	}
	seed := ""
	expect := min(size, 5)
	procs := make([]*proc, size)
	defer func() {
		var ps []*childproc.Proc
		for _, p := range procs {
			if p != nil {
				ps = append(ps, p.Proc)
			}
		}
		childproc.StopAll(ps, 10*time.Second)
	}()
	start := time.Now()
	for i := range size {
		args := []string{"-child", "-memprofilerate", fmt.Sprint(*flagMemRate), "-dir", filepath.Join(tmp, fmt.Sprint(i)), "-listen", peers[i], "-heartbeat-ticks", fmt.Sprint(*flagHB), "-gossip-interval", flagGI.String(), "-probe-interval", flagPI.String(), "-keepalive", flagKA.String(), "-learners", fmt.Sprint(*flagLearn)}
		if gossip {
			exp := expect // founders
			if bare {
				exp = size // ready when it sees every member alive
				args = append(args, "-bare")
			}
			args = append(args, "-gossip", "-expect", fmt.Sprint(exp), "-name", fmt.Sprintf("m%d", i))
			if i > 0 {
				args = append(args, "-seeds", seed)
			}
		} else {
			args = append(args, "-peers", strings.Join(peers, ","))
			if *flagMTLS {
				files, err := memberTLSFiles(tmp, uint64(i+1))
				if err != nil {
					return err
				}
				args = append(args, "-tls", files)
			}
		}
		cp, f, err := childproc.Start(filepath.Join(tmp, fmt.Sprintf("child%d.log", i)), "READY", self, args...)
		if err != nil {
			return fmt.Errorf("child %d did not start: %w", i, err)
		}
		p := &proc{Proc: cp, url: f[0]}
		procs[i] = p
		if i == 0 && len(f) > 1 {
			seed = f[1]
		}
	}
	// Ready (session and leader) everywhere, and for a gossip fleet the
	// configuration at its target: 5 voters (or 3), the learners asked for.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if time.Now().After(deadline) {
			return fmt.Errorf("fleet not ready within 5 minutes")
		}
		ok := true
		for _, p := range procs {
			if code, _ := get(p.url + "/lockraft/readyz"); code != 200 {
				ok = false
				break
			}
		}
		if ok && gossip && !bare {
			var mv lockraft.MembersView
			if code, body := get(procs[0].url + "/lockraft/members"); code == 200 && json.Unmarshal([]byte(body), &mv) == nil {
				roles := map[string]int{}
				for _, m := range mv.Members {
					roles[m.Role]++
				}
				ok = roles[lockraft.RoleVoter] == expect && roles[lockraft.RoleLearner] == min(max(*flagLearn, 0), size-expect)
			} else {
				ok = false
			}
		}
		if ok {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	formed := time.Since(start)
	time.Sleep(*flagSettle)
	for _, p := range procs {
		var st lockraft.StatusView
		if code, body := get(p.url + "/lockraft/status"); code == 200 && json.Unmarshal([]byte(body), &st) == nil {
			p.role = st.Role
			if st.IsLeader {
				p.role += "*"
			}
		}
	}

	// Idle.
	applied := func() uint64 {
		var st lockraft.StatusView
		_, body := get(procs[0].url + "/lockraft/status")
		json.Unmarshal([]byte(body), &st)
		return st.Commit
	}
	commit0 := applied()
	load0 := childproc.Loadavg()
	cpu0 := make([]int64, size)
	sw0 := make([]int64, size)
	for i, p := range procs {
		cpu0[i] = stats(p.url)["cpu_us"]
		sw0[i] = childproc.CtxSwitches(p.Pid())
	}
	t0 := time.Now()
	var pwg sync.WaitGroup
	if *flagProfile != "" {
		picked := map[string]bool{} // the leader and one member of each other role
		for i, p := range procs {
			if picked[p.role] {
				continue
			}
			picked[p.role] = true
			pwg.Go(func() {
				secs := int(flagIdle.Seconds()) - 1
				_, body := childproc.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", p.url, secs), *flagIdle+30*time.Second)
				file := filepath.Join(*flagProfile, fmt.Sprintf("fleet%s-proc%d-%s.pprof", kind, i, strings.TrimSuffix(p.role, "*")))
				os.WriteFile(file, []byte(body), 0o644)
			})
		}
	}
	time.Sleep(*flagIdle)
	window := time.Since(t0)
	pwg.Wait()
	type row struct {
		idx        int
		role       string
		cpuPct     float64
		rssMiB     float64
		goroutines int64
		fds        int
		wakes      float64
	}
	var rows []row
	for i, p := range procs {
		s := stats(p.url)
		sw := childproc.CtxSwitches(p.Pid())
		rows = append(rows, row{i, p.role, float64(s["cpu_us"]-cpu0[i]) / float64(window.Microseconds()) * 100,
			float64(childproc.RSSKiB(p.Pid())) / 1024, s["goroutines"], fdCount(p.Pid()),
			float64(sw-sw0[i]) / window.Seconds()})
	}
	load1 := childproc.Loadavg()
	idleEntries := applied() - commit0
	if bare {
		fmt.Printf("\n== 50 members of the gossip layer alone (LAN timing; no raft, no session): formed in %v; idle window %v; load average %s before, %s after\n",
			formed.Round(100*time.Millisecond), window.Round(time.Second), load0, load1)
		cpu := func(r row) float64 { return r.cpuPct }
		wakes := func(r row) float64 { return r.wakes }
		rss := func(r row) float64 { return r.rssMiB }
		fmt.Printf("gossip-only n=%d idle-cpu%% median %.3f max %.3f | wakes/s median %.0f | rss-MiB median %.1f\n",
			len(rows), childproc.Median(rows, cpu), childproc.MaxOf(rows, cpu), childproc.Median(rows, wakes), childproc.Median(rows, rss))
		return nil
	}

	// S2 load.
	callers := *flagCallers
	per := max(1, *flagPairs/callers)
	before := make([]map[string]int64, size)
	for i, p := range procs {
		before[i] = stats(p.url)
	}
	leaderAllocs := func(when string) {
		for i, p := range procs {
			if *flagProfile != "" && strings.HasSuffix(p.role, "*") {
				_, body := get(p.url + "/debug/pprof/allocs")
				file := filepath.Join(*flagProfile, fmt.Sprintf("fleet%s-proc%d-leader-allocs-%s.pprof", kind, i, when))
				os.WriteFile(file, []byte(body), 0o644)
			}
		}
	}
	leaderAllocs("before-s2") // diff with -base: what the leader allocated under S2
	var wg sync.WaitGroup
	var cpuProf sync.WaitGroup
	defer cpuProf.Wait()
	if *flagProfile != "" && *flagS2CPU > 0 {
		for i, p := range procs {
			if strings.HasSuffix(p.role, "*") {
				cpuProf.Go(func() { // the leader's CPU over the first -s2cpu of the load
					_, body := childproc.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", p.url, int(flagS2CPU.Seconds())), *flagS2CPU+30*time.Second)
					os.WriteFile(filepath.Join(*flagProfile, fmt.Sprintf("fleet%s-proc%d-leader-s2-cpu.pprof", kind, i)), []byte(body), 0o644)
				})
			}
		}
	}
	lt0 := time.Now()
	loadErrs := 0
	var mu sync.Mutex
	for i, p := range procs {
		c := callers / size
		if i < callers%size {
			c++
		}
		if c == 0 {
			continue
		}
		wg.Go(func() {
			code, body := childproc.Get(fmt.Sprintf("%s/load?callers=%d&pairs=%d&prefix=s2-%d", p.url, c, per, i), 6*time.Minute)
			var r map[string]int
			mu.Lock()
			defer mu.Unlock()
			if code != 200 || json.Unmarshal([]byte(body), &r) != nil {
				loadErrs++
				return
			}
			loadErrs += r["errors"]
		})
	}
	wg.Wait()
	lwall := time.Since(lt0)
	leaderAllocs("after-s2")
	pairs := per * callers
	// Per process: what each member's process spent per pair the cluster did
	// (its callers' share included). The leader's row is the one a host
	// running the leader pays.
	type s2row struct {
		role          string
		cpuUs, allocs float64
	}
	var s2 []s2row
	cpuAll := 0.0
	for i, p := range procs {
		after := stats(p.url)
		r := s2row{p.role, float64(after["cpu_us"]-before[i]["cpu_us"]) / float64(pairs), float64(after["mallocs"]-before[i]["mallocs"]) / float64(pairs)}
		cpuAll += r.cpuUs
		s2 = append(s2, r)
	}

	// Report.
	name := map[string]string{"3": "3-member static cluster", "3g": "3-member gossip cluster"}[kind]
	if *flagMTLS && !gossip {
		name += ", mutual TLS"
	}
	if name == "" {
		learners := min(max(*flagLearn, 0), size-expect)
		name = fmt.Sprintf("fleet of %d (gossip: %d voters, %d learners, %d light)", size, expect, learners, size-expect-learners)
	}
	fmt.Printf("\n== %s: formed and ready in %v; idle window %v (raft entries committed meanwhile: %d); load average %s before, %s after\n",
		name, formed.Round(100*time.Millisecond), window.Round(time.Second), idleEntries, load0, load1)
	fmt.Printf("%-6s %-9s %10s %8s %11s %5s %8s\n", "proc", "role", "idle-cpu%", "rss-MiB", "goroutines", "fds", "wakes/s")
	byRole := map[string][]row{}
	for _, r := range rows {
		role := strings.TrimSuffix(r.role, "*")
		byRole[role] = append(byRole[role], r)
		if size <= 10 || r.idx < 8 || strings.HasSuffix(r.role, "*") {
			fmt.Printf("%-6d %-9s %10.3f %8.1f %11d %5d %8.0f\n", r.idx, r.role, r.cpuPct, r.rssMiB, r.goroutines, r.fds, r.wakes)
		}
	}
	if size > 10 {
		fmt.Printf("(%d more rows summarised below)\n", size-8)
	}
	for _, role := range []string{"voter", "learner", "light"} {
		rs := byRole[role]
		if len(rs) == 0 {
			continue
		}
		cpu := func(r row) float64 { return r.cpuPct }
		rss := func(r row) float64 { return r.rssMiB }
		target := "≤ 0.5"
		if role == "light" {
			target = "≤ 0.1"
		}
		wakes := func(r row) float64 { return r.wakes }
		fmt.Printf("%-8s n=%-3d idle-cpu%% median %.3f max %.3f (target %s) | wakes/s median %.0f | rss-MiB median %.1f max %.1f (target ≤ 40) | goroutines max %d | fds max %d\n",
			role, len(rs), childproc.Median(rs, cpu), childproc.MaxOf(rs, cpu), target, childproc.Median(rs, wakes), childproc.Median(rs, rss), childproc.MaxOf(rs, rss),
			slices.MaxFunc(rs, func(a, b row) int { return int(a.goroutines - b.goroutines) }).goroutines,
			slices.MaxFunc(rs, func(a, b row) int { return a.fds - b.fds }).fds)
	}
	fmt.Printf("S2 (%d callers on distinct names, %d pairs): %.0f pairs/s, all processes' CPU per Lock+Unlock pair %.0f µs, errors %d\n",
		callers, pairs, float64(pairs)/lwall.Seconds(), cpuAll, loadErrs)
	for i, r := range s2 {
		if size <= 10 || strings.HasSuffix(r.role, "*") {
			fmt.Printf("S2 per pair, proc %d %-9s CPU %5.1f µs, allocations %5.1f\n", i, r.role, r.cpuUs, r.allocs)
		}
	}
	return nil
}

// clusterID is the fleets' cluster id (member certificates name it).
const clusterID = "embedcost"

// memberTLSFiles writes the CA (made on first use) and member id's
// certificate and key under dir, and returns the child's -tls value:
// "ca,cert,key".
func memberTLSFiles(dir string, id uint64) (string, error) {
	from, until := time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	if benchCA == nil {
		ca, err := certgen.NewCA("embedcost CA", from, until)
		if err != nil {
			return "", err
		}
		benchCA = ca
	}
	cert, key, err := benchCA.Member(clusterID, id, []string{"127.0.0.1"}, from, until)
	if err != nil {
		return "", err
	}
	files := []string{filepath.Join(dir, "ca.pem"), filepath.Join(dir, fmt.Sprintf("m%d.pem", id)), filepath.Join(dir, fmt.Sprintf("m%d-key.pem", id))}
	for i, b := range [][]byte{benchCA.CertPEM, cert, key} {
		if err := os.WriteFile(files[i], b, 0o600); err != nil {
			return "", err
		}
	}
	return strings.Join(files, ","), nil
}

var benchCA *certgen.CA

func get(url string) (int, string) { return childproc.Get(url, 5*time.Second) }

func stats(url string) map[string]int64 {
	var m map[string]int64
	_, body := get(url + "/stats")
	json.Unmarshal([]byte(body), &m)
	return m
}

func fdCount(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

// maxLearners maps -learners to VoterPolicy.MaxLearners, whose zero is the
// default (2) and whose negative is none.
func maxLearners(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
