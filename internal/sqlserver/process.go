package sqlserver

import (
	"net"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// A Process is a server process started as a child: a database server of
// this package, or any other server a caller starts with StartProcess (the
// bench's redis-server and ZooKeeper). It stays listed until it ends, so
// that StopAll can end every one an interrupted run left behind.
type Process struct {
	cmd   *exec.Cmd
	grace time.Duration // End: how long SIGTERM gets before SIGKILL (0: SIGKILL at once)
	done  chan struct{} // closed when the process has exited
}

var (
	runningMu sync.Mutex
	running   = map[any]func(){} // what StopAll ends, each with its own end
)

func list(key any, end func()) {
	runningMu.Lock()
	running[key] = end
	runningMu.Unlock()
}

func unlist(key any) {
	runningMu.Lock()
	delete(running, key)
	runningMu.Unlock()
}

// StopAll ends every server and process this process started and has not
// ended (for a signal handler).
func StopAll() {
	runningMu.Lock()
	var all []func()
	for _, end := range running {
		all = append(all, end)
	}
	runningMu.Unlock()
	for _, end := range all {
		end()
	}
}

// StartProcess starts cmd and lists it. End gives it grace after SIGTERM
// before it SIGKILLs it (0: SIGKILL at once).
func StartProcess(cmd *exec.Cmd, grace time.Duration) (*Process, error) {
	p, err := startProcess(cmd, grace)
	if err != nil {
		return nil, err
	}
	list(p, p.End)
	return p, nil
}

// startProcess starts cmd without listing it (a Server lists itself).
func startProcess(cmd *exec.Cmd, grace time.Duration) (*Process, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, grace: grace, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	return p, nil
}

// End stops the process (SIGTERM, then SIGKILL once the grace has run out,
// or SIGKILL at once without one), waits for it and unlists it.
func (p *Process) End() {
	p.end(p.grace)
	unlist(p)
}

func (p *Process) end(grace time.Duration) {
	if grace > 0 {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			p.cmd.Process.Kill()
			<-p.done
		}
	} else {
		p.cmd.Process.Kill()
		<-p.done
	}
}

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// FreePort is a TCP port free on loopback now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
