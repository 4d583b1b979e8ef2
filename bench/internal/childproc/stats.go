package childproc

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"syscall"
	"time"
)

// Stats is a process's memory, GC and goroutine figures, as its /stats
// handler (StatsHandler) answers them.
type Stats struct {
	// From /proc/self/status, KiB: the resident set, and its anonymous
	// (heap, stacks) and file-backed (mapped files: bbolt's mmap) parts.
	RSSKiB     int64 `json:"rss_kib"`
	RSSAnonKiB int64 `json:"rss_anon_kib"`
	RSSFileKiB int64 `json:"rss_file_kib"`
	// From runtime/metrics, bytes: the heap's objects (live and not yet
	// swept: "heap in use"), the heap marked live by the last GC, and all
	// memory the Go runtime has mapped.
	HeapObjects uint64 `json:"heap_objects"`
	HeapLive    uint64 `json:"heap_live"`
	GoTotal     uint64 `json:"go_total"`
	GCCycles    uint64 `json:"gc_cycles"`
	Goroutines  uint64 `json:"goroutines"`
	// GCPauses: the stop-the-world pauses of the GC since the process
	// started (/sched/pauses/total/gc:seconds).
	GCPauses Hist `json:"gc_pauses"`
	// CPUMicros: the process's CPU time so far, user and system
	// (getrusage).
	CPUMicros int64 `json:"cpu_us"`
	// Forced: a runtime.GC and debug.FreeOSMemory ran just before these
	// were read (?gc=1).
	Forced bool `json:"forced,omitempty"`
}

// Hist is a runtime/metrics histogram's non-empty buckets, in order.
type Hist []Bucket

// Bucket is one bucket: its index in the runtime's histogram, its upper
// bound (seconds; for the last, unbounded bucket, its lower bound) and its
// count.
type Bucket struct {
	I  int     `json:"i"`
	Hi float64 `json:"hi"`
	N  uint64  `json:"n"`
}

// Count is the number of samples.
func (h Hist) Count() uint64 {
	var n uint64
	for _, b := range h {
		n += b.N
	}
	return n
}

// Quantile is the upper bound of the bucket holding quantile q (0 if
// empty): the runtime's buckets are narrow (a few per cent of their bound),
// so it is close to the sample.
func (h Hist) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for _, b := range h {
		seen += b.N
		if seen >= want {
			return time.Duration(b.Hi * float64(time.Second))
		}
	}
	return time.Duration(h[len(h)-1].Hi * float64(time.Second))
}

// Max is the upper bound of the highest non-empty bucket.
func (h Hist) Max() time.Duration { return h.Quantile(1) }

// Sub is what h counted since old, an earlier reading of the same
// histogram.
func (h Hist) Sub(old Hist) Hist {
	prev := make(map[int]uint64, len(old))
	for _, b := range old {
		prev[b.I] = b.N
	}
	var d Hist
	for _, b := range h {
		if n := b.N - min(b.N, prev[b.I]); n > 0 {
			d = append(d, Bucket{b.I, b.Hi, n})
		}
	}
	return d
}

// ReadStats reads this process's Stats.
func ReadStats() Stats {
	samples := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/sched/goroutines:goroutines"},
		{Name: "/sched/pauses/total/gc:seconds"},
	}
	metrics.Read(samples)
	u := func(i int) uint64 {
		if samples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return samples[i].Value.Uint64()
	}
	s := Stats{HeapObjects: u(0), HeapLive: u(1), GoTotal: u(2), GCCycles: u(3), Goroutines: u(4)}
	if samples[5].Value.Kind() == metrics.KindFloat64Histogram {
		h := samples[5].Value.Float64Histogram()
		for i, n := range h.Counts {
			if n == 0 {
				continue
			}
			hi := h.Buckets[i+1]
			if math.IsInf(hi, 1) {
				hi = h.Buckets[i]
			}
			s.GCPauses = append(s.GCPauses, Bucket{i, hi, n})
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.CPUMicros = ru.Utime.Sec*1e6 + int64(ru.Utime.Usec) + ru.Stime.Sec*1e6 + int64(ru.Stime.Usec)
	}
	pid := os.Getpid()
	s.RSSKiB = ProcStatusKiB(pid, "VmRSS")
	s.RSSAnonKiB = ProcStatusKiB(pid, "RssAnon")
	s.RSSFileKiB = ProcStatusKiB(pid, "RssFile")
	return s
}

// StatsHandler serves GET /stats: this process's Stats as JSON. With ?gc=1
// it first runs runtime.GC and debug.FreeOSMemory (returning freed memory
// to the system), so that the figures count what is live.
func StatsHandler(w http.ResponseWriter, r *http.Request) {
	forced := r.URL.Query().Get("gc") == "1"
	if forced {
		runtime.GC()
		debug.FreeOSMemory()
	}
	s := ReadStats()
	s.Forced = forced
	json.NewEncoder(w).Encode(s)
}

// FetchStats reads a child's /stats (base is its control URL); gc asks for
// a forced GC first.
func FetchStats(base string, gc bool) (Stats, error) {
	url := base + "/stats"
	if gc {
		url += "?gc=1"
	}
	code, body := Get(url, time.Minute)
	var s Stats
	if code != http.StatusOK {
		return s, fmt.Errorf("GET %s: %d %s", url, code, body)
	}
	return s, json.Unmarshal([]byte(body), &s)
}
