// Package childproc holds what the bench's cost commands (embedcost,
// restartcost, scalelocks, fleet) share: members run as child processes of the
// command (Proc), each serving a /load handler and its own figures
// (/stats: StatsHandler), and the parent reads the children's figures from
// /proc and over HTTP on loopback.
package childproc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockraft/lockraft"
)

// LoadHandler serves /load?callers=C&pairs=P&prefix=X: C goroutines each
// take and release the name X/i P times, and the reply is {"errors": E},
// the calls that failed. It blocks until all are done (at most 5 minutes).
func LoadHandler(n *lockraft.Node) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		callers, _ := strconv.Atoi(r.URL.Query().Get("callers"))
		pairs, _ := strconv.Atoi(r.URL.Query().Get("pairs"))
		prefix := r.URL.Query().Get("prefix")
		var wg sync.WaitGroup
		var mu sync.Mutex
		errs := 0
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		for g := range callers {
			wg.Go(func() {
				name := fmt.Sprintf("%s/%d", prefix, g)
				for range pairs {
					l, err := n.Lock(ctx, name)
					if err == nil {
						err = l.Unlock(ctx)
					}
					if err != nil {
						mu.Lock()
						errs++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		json.NewEncoder(w).Encode(map[string]int{"errors": errs})
	}
}

// Get fetches url with timeout d: the status and the body, or 0 and the
// error's text.
func Get(url string, d time.Duration) (int, string) {
	c := http.Client{Timeout: d}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// RSSKiB is the resident set of process pid in KiB (0 if unreadable).
func RSSKiB(pid int) int64 { return ProcStatusKiB(pid, "VmRSS") }

// ProcStatusKiB is the field of /proc/PID/status named field (VmRSS,
// RssAnon, RssFile, VmHWM, ...), in KiB (0 if unreadable).
func ProcStatusKiB(pid int, field string) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// CtxSwitches is process pid's voluntary context switches, all threads
// together (0 if unreadable): each is a thread going to sleep, so over an
// idle window it counts the runtime's wake-ups, a steadier figure than the
// CPU time on a shared machine.
func CtxSwitches(pid int) int64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				sum += n
			}
		}
	}
	return sum
}

// Loadavg is the machine's 1, 5 and 15 minute load averages ("?" if
// unreadable).
func Loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// FreePorts returns n distinct ports free on loopback for TCP and UDP (a
// gossip member binds both), all held until every one is chosen so that no
// two are the same.
func FreePorts(n int) ([]int, error) {
	var ports []int
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		closers = append(closers, l)
		p := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		closers = append(closers, u)
		ports = append(ports, p)
	}
	return ports, nil
}
