//go:build !linux

package node

import (
	"runtime"
	"time"
)

func (n *Node) lockLoopThread() { runtime.LockOSThread() }

// LoopCPU reports the loop thread's CPU time; not available on this platform.
func (n *Node) LoopCPU() (time.Duration, bool) { return 0, false }
