package main

import (
	"net"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// A child is a server process the bench started (redis-server, a ZooKeeper
// JVM). Every child is listed until it ends, so that an interrupted run
// can end them all (endChildren).
type child struct {
	cmd   *exec.Cmd
	grace time.Duration // end: how long SIGTERM gets before SIGKILL (0: SIGKILL at once)
	done  chan struct{} // closed when the process has exited
}

var (
	childrenMu sync.Mutex
	children   = map[*child]bool{}
)

// startChild starts cmd and lists it.
func startChild(cmd *exec.Cmd, grace time.Duration) (*child, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, grace: grace, done: make(chan struct{})}
	go func() { cmd.Wait(); close(c.done) }()
	childrenMu.Lock()
	children[c] = true
	childrenMu.Unlock()
	return c, nil
}

// end stops the process (SIGTERM, then SIGKILL once the grace has run out,
// or SIGKILL at once without one), waits for it and unlists it.
func (c *child) end() {
	if c.grace > 0 {
		c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(c.grace):
			c.cmd.Process.Kill()
			<-c.done
		}
	} else {
		c.cmd.Process.Kill()
		<-c.done
	}
	childrenMu.Lock()
	delete(children, c)
	childrenMu.Unlock()
}

// endChildren ends every child still running.
func endChildren() {
	childrenMu.Lock()
	var all []*child
	for c := range children {
		all = append(all, c)
	}
	childrenMu.Unlock()
	for _, c := range all {
		c.end()
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
