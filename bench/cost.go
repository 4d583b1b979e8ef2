package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What S2's pairs cost the host that serves them, beside the rate.
//
//   - cpu_us_per_pair: CPU time (user + system) per Lock+Unlock pair. For the
//     systems that run in this process (lockraft's three members, etcd's
//     three members) it is the whole process's: every member, and the 64
//     callers, which is the cost an embedded library puts on its host. For a
//     server in its own process (Redis) it is that process's alone; its
//     clients' work in this process is not counted.
//   - allocs_per_pair: heap allocations per pair in this process (in-process
//     systems only): the three members and the callers together.

// serverProcess is a system whose servers run in processes of their own;
// their CPU is what cpu_us_per_pair counts.
type serverProcess interface {
	serverPIDs() []int
}

// inProcess is a system whose members all run in this process.
type inProcess interface {
	inProcess()
}

// costMeter reads the counters before and after a scenario.
type costMeter struct {
	pids    []int // nil: this process
	cpu0    time.Duration
	allocs0 uint64
}

// startCost starts a meter; nil (which reports nothing) for a system that
// is neither all in this process nor says which processes serve it.
func startCost(sys system) *costMeter {
	m := &costMeter{}
	switch s := sys.(type) {
	case serverProcess:
		m.pids = s.serverPIDs()
	case inProcess:
	default:
		return nil
	}
	m.cpu0 = m.cpu()
	if m.pids == nil {
		m.allocs0 = mallocs()
	}
	return m
}

// report adds the scenario's cost per pair to rep.
func (m *costMeter) report(rep *report, sysName, scen string, pairs, run int) {
	if m == nil || pairs == 0 {
		return
	}
	if cpu := m.cpu(); cpu > 0 && m.cpu0 >= 0 {
		rep.add(sysName, scen, "cpu_us_per_pair", float64((cpu-m.cpu0).Microseconds())/float64(pairs), run)
	}
	if m.pids == nil {
		rep.add(sysName, scen, "allocs_per_pair", float64(mallocs()-m.allocs0)/float64(pairs), run)
	}
}

func (m *costMeter) cpu() time.Duration {
	if m.pids == nil {
		var ru syscall.Rusage
		if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
			return -1
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var sum time.Duration
	for _, pid := range m.pids {
		d, ok := procCPU(pid)
		if !ok {
			return -1
		}
		sum += d
	}
	return sum
}

func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// procCPU is the user + system time of process pid (/proc/pid/stat, in
// clock ticks of 10 ms).
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64) // field 14: utime
	st, err2 := strconv.ParseInt(f[12], 10, 64) // field 15: stime
	if err1 != nil || err2 != nil {
		return 0, false
	}
	const tick = 10 * time.Millisecond // USER_HZ is 100 on Linux
	return time.Duration(ut+st) * tick, true
}
