package node

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// loopThreads records the OS thread each node's loop runs on, once pinned
// there by pinLoopThread (a tune function), so that the thread's CPU time is
// the loop's alone (loopCPU): for measuring.
var loopThreads sync.Map // *Node's knobs → thread id

// pinLoopThread makes the node started with c pin its loop goroutine to its
// OS thread for the loop's lifetime and record the thread.
func pinLoopThread(c *Config) {
	k := knobsOfConfig(c)
	k.OnLoopStart = func() {
		runtime.LockOSThread()
		loopThreads.Store(k, syscall.Gettid())
	}
}

// loopCPU is the CPU time (user + system, as the kernel's schedstat counts
// it) of n's loop thread; ok is false unless n was started with
// pinLoopThread and the platform reports it.
func loopCPU(n *Node) (d time.Duration, ok bool) {
	tid, found := loopThreads.Load(n.k)
	if !found {
		return 0, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/schedstat", tid))
	if err != nil {
		return 0, false
	}
	var ns int64
	if _, err := fmt.Sscan(string(b), &ns); err != nil {
		return 0, false
	}
	return time.Duration(ns), true
}
