package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// hostInfo describes the machine the numbers came from.
type hostInfo struct {
	cpu, kernel, goVersion string
	cores                  int
	fsyncP50, fsyncP99     time.Duration
	fsync3P50              time.Duration // three files synced at once, as a 3-node cluster on one disk does
	loadStart, loadEnd     string
}

func (h hostInfo) String() string {
	return fmt.Sprintf("host: %s, %d cores, %s, kernel %s, fsync(4 KiB) p50 %.3f ms p99 %.3f ms, three at once p50 %.3f ms, load average %s\n",
		h.cpu, h.cores, h.goVersion, h.kernel, ms(h.fsyncP50), ms(h.fsyncP99), ms(h.fsync3P50), h.loadStart)
}

func describeHost(dir string) hostInfo {
	h := hostInfo{cpu: "unknown", cores: runtime.NumCPU(), goVersion: runtime.Version(), loadStart: loadAvg()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				h.cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.kernel = strings.TrimSpace(string(b))
	}
	h.fsyncP50, h.fsyncP99 = measureFsync(dir, 100)
	h.fsync3P50 = measureFsyncConcurrent(dir, 3, 100)
	return h
}

// measureFsyncConcurrent is measureFsync in k files at once: the p50 of every
// write+fsync. Three nodes of one cluster on one machine sync at the same
// moment for the same entry, and a commit waits for the second of them.
func measureFsyncConcurrent(dir string, k, n int) time.Duration {
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() {
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("fsync-probe-%d", i)))
			if err != nil {
				return
			}
			defer os.Remove(f.Name())
			defer f.Close()
			buf := make([]byte, 4096)
			for range n {
				t := time.Now()
				if _, err := f.Write(buf); err != nil {
					return
				}
				if err := f.Sync(); err != nil {
					return
				}
				d := time.Since(t)
				mu.Lock()
				all = append(all, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(all) == 0 {
		return 0
	}
	slices.Sort(all)
	return all[len(all)/2]
}

// measureFsync appends 4 KiB and fsyncs, n times, in the directory the
// systems keep their data in.
func measureFsync(dir string, n int) (p50, p99 time.Duration) {
	f, err := os.Create(filepath.Join(dir, "fsync-probe"))
	if err != nil {
		return 0, 0
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	lat := make([]time.Duration, 0, n)
	for range n {
		t := time.Now()
		if _, err := f.Write(buf); err != nil {
			return 0, 0
		}
		if err := f.Sync(); err != nil {
			return 0, 0
		}
		lat = append(lat, time.Since(t))
	}
	slices.Sort(lat)
	return lat[n/2], lat[n*99/100]
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
