package childproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Proc is a member run as a child process of the command. Its stdin is a
// pipe: closing it asks the child to close its node and exit. Its stderr
// goes to a log file, and its stdout is read line by line: the first line
// says it is up. It runs in a process group of its own, so a terminal's
// Ctrl-C reaches only the command, which then stops its children itself;
// on Linux it is also killed if the command dies without doing so.
type Proc struct {
	Cmd     *exec.Cmd
	LogPath string
	Started time.Time // just before the process was started

	stdin io.WriteCloser
	out   *bufio.Reader
	logf  *os.File

	once    sync.Once
	done    chan struct{}
	waitErr error
}

// Start runs the command at path with args, its stderr appended to logPath,
// and returns once the child printed its first line, which must start with
// the word want: the returned fields are that line's after want. If the
// child says something else or exits first, Start returns an error quoting
// the end of its log.
func Start(logPath, want, path string, args ...string) (*Proc, []string, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, nil, err
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return nil, nil, err
	}
	p := &Proc{Cmd: cmd, LogPath: logPath, stdin: in, out: bufio.NewReader(out), logf: logf, Started: time.Now()}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, nil, err
	}
	f, err := p.Line(want)
	if err != nil {
		return nil, nil, err
	}
	return p, f, nil
}

// Pid is the child's process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Line reads the child's next stdout line, which must start with the word
// want, and returns its fields after that word. Otherwise the child is
// killed and the error quotes the end of its log.
func (p *Proc) Line(want string) ([]string, error) {
	line, err := p.out.ReadString('\n')
	f := strings.Fields(line)
	if err == nil && len(f) > 0 && f[0] == want {
		return f[1:], nil
	}
	p.Kill()
	return nil, fmt.Errorf("child %d: wanted %s, got %q (%v); its log ends:\n%s", p.Pid(), want, line, err, LogTail(p.LogPath, 3000))
}

// LogTail is the last n bytes of the file at path.
func LogTail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// exited is closed once the child has exited (and reaped).
func (p *Proc) exited() <-chan struct{} {
	p.once.Do(func() {
		p.done = make(chan struct{})
		go func() {
			p.waitErr = p.Cmd.Wait()
			p.logf.Close()
			close(p.done)
		}()
	})
	return p.done
}

// Stop closes the child's stdin, which makes it close its node and exit,
// and waits up to timeout for that; then it kills it.
func (p *Proc) Stop(timeout time.Duration) error {
	p.stdin.Close()
	select {
	case <-p.exited():
		return p.waitErr
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("child %d did not exit within %v of its stdin closing; killed", p.Pid(), timeout)
	}
}

// Kill sends the child SIGKILL (a crash: nothing is closed) and waits until
// it is gone.
func (p *Proc) Kill() {
	if err := p.Cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return
	}
	<-p.exited()
}

// StopAll stops every child at once (closing every stdin first, so that
// they close their nodes together), each within timeout. Nil entries are
// skipped.
func StopAll(ps []*Proc, timeout time.Duration) {
	var wg sync.WaitGroup
	for _, p := range ps {
		if p != nil {
			p.stdin.Close()
		}
	}
	for _, p := range ps {
		if p != nil {
			wg.Go(func() { p.Stop(timeout) })
		}
	}
	wg.Wait()
}

// KillAll sends every child SIGKILL in one pass, so that they crash at
// the same instant (a machine or a rack lost at once), and then waits until
// all are gone. It returns the time just before the first signal. Nil
// entries are skipped.
func KillAll(ps []*Proc) time.Time {
	at := time.Now()
	for _, p := range ps {
		if p != nil {
			p.Cmd.Process.Kill()
		}
	}
	for _, p := range ps {
		if p != nil {
			p.Kill()
		}
	}
	return at
}
