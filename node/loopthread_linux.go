package node

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"time"
)

// lockLoopThread pins the loop goroutine to its OS thread for the loop's
// lifetime (the thread exits with it) and records the thread id.
func (n *Node) lockLoopThread() {
	runtime.LockOSThread()
	n.loopTID.Store(int64(syscall.Gettid()))
}

// LoopCPU is the CPU time (user + system, as the kernel's schedstat counts
// it) of the loop's OS thread; ok is false unless TestHooks.LockLoopThread is
// set and the platform reports it. Only the loop goroutine runs on that
// thread, so this is the loop's own CPU time.
func (n *Node) LoopCPU() (d time.Duration, ok bool) {
	tid := n.loopTID.Load()
	if tid == 0 {
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
