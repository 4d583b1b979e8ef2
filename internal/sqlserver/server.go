// Package sqlserver starts PostgreSQL and MariaDB servers from Debian's
// packages as child processes, listening on loopback only, with their data
// in a fresh temp directory, and stops them by PID. The fence package's
// tests, the bench's MySQL systems and cmd/sqlserver use it, and the bench
// starts its other servers' processes through it too (StartProcess), so
// that one StopAll ends them all; it is not part of lockraft's API.
package sqlserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// ErrNotInstalled: the server binary is missing; the message names the
// Debian package that provides it.
var ErrNotInstalled = errors.New("not installed")

// Options for Start*.
type Options struct {
	// Durable keeps each server's default durability (fsync at every
	// commit). Tests turn it off for speed; the bench keeps it on.
	Durable bool
	// Ready bounds the wait for the server to accept connections
	// (default 60 s).
	Ready time.Duration
}

// Server is one running database server process.
type Server struct {
	// DSN connects to the server's test database (driver "pgx" or "mysql").
	DSN string
	// URL is the same as a URL (postgres://… or mysql://…), the form
	// examples/cluster's -db flag takes.
	URL    string
	Driver string
	Dir    string // data and logs; removed by Stop
	PID    int

	proc    *Process // nil until started
	logPath string
	stopped sync.Once
}

// start runs cmd, registers the server and waits until ping succeeds.
func (s *Server) start(cmd *exec.Cmd, opts Options, ping func() error) error {
	log, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = mergeAttr(cmd.SysProcAttr)
	proc, err := startProcess(cmd, stopGrace)
	log.Close()
	if err != nil {
		return err
	}
	s.proc, s.PID = proc, cmd.Process.Pid
	list(s, s.Stop)
	wait := opts.Ready
	if wait == 0 {
		wait = 60 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		err := ping()
		if err == nil {
			return nil
		}
		select {
		case <-proc.done:
			return fmt.Errorf("%s exited during start-up: %v\n%s", cmd.Path, err, s.logTail())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("%s not ready after %v: %v\n%s", cmd.Path, wait, err, s.logTail())
		}
	}
}

func mergeAttr(a *syscall.SysProcAttr) *syscall.SysProcAttr {
	if a == nil {
		a = &syscall.SysProcAttr{}
	}
	a.Setpgid = true // a ^C to the test does not reach the server first
	a.Pdeathsig = syscall.SIGKILL
	return a
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// Stop asks the server to shut down (SIGTERM to its PID: both servers then
// finish their work and exit), waits up to 20 s, then SIGKILLs it, and
// removes its directory. Idempotent.
func (s *Server) Stop() { s.end(stopGrace) }

// stopGrace is how long Stop waits after SIGTERM.
const stopGrace = 20 * time.Second

// Kill ends the server at once (SIGKILL by PID), as a crash would, and
// removes its directory.
func (s *Server) Kill() { s.end(0) }

// end, the first time, ends the process (if it was started) as
// Process.end does with grace, unlists the server and removes its
// directory.
func (s *Server) end(grace time.Duration) {
	s.stopped.Do(func() {
		if s.proc != nil {
			s.proc.end(grace)
		}
		unlist(s)
		os.RemoveAll(s.Dir)
	})
}

// killOnError, deferred by a Start function once the server has its
// directory, ends the server (if it was started) and removes the directory
// when the start fails (*err).
func (s *Server) killOnError(err *error) {
	if *err != nil {
		s.Kill()
	}
}

// newServer is a Server of driver in a fresh temp directory named for kind,
// with its log there; data is where its data directory goes.
func newServer(kind, driver string) (s *Server, data string, err error) {
	dir, err := os.MkdirTemp("", "lockraft-"+kind+"-")
	if err != nil {
		return nil, "", err
	}
	return &Server{Dir: dir, Driver: driver, logPath: filepath.Join(dir, "server.log")}, filepath.Join(dir, "data"), nil
}

// Open opens a *sql.DB on the server's test database.
func (s *Server) Open() (*sql.DB, error) { return sql.Open(s.Driver, s.DSN) }

func ping(driver, dsn string) error {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// runAs is the account a server that refuses root runs as when we are
// root: uid, gid, and whether to switch at all.
func runAs(name string) (uid, gid uint32, sw bool, err error) {
	if os.Geteuid() != 0 {
		return 0, 0, false, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return 0, 0, false, fmt.Errorf("running as root and there is no %q account to run the server as: %w", name, err)
	}
	ui, _ := strconv.ParseUint(u.Uid, 10, 32)
	gi, _ := strconv.ParseUint(u.Gid, 10, 32)
	return uint32(ui), uint32(gi), true, nil
}

// chownTree gives dir and everything in it to uid:gid.
func chownTree(dir string, uid, gid uint32) error {
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(uid), int(gid))
	})
}

// findBins finds each of a package's binaries, each given as findBin's
// candidates, in order; the first one missing is the error.
func findBins(pkg string, bins [][]string) ([]string, error) {
	paths := make([]string, len(bins))
	for i, candidates := range bins {
		p, err := findBin(pkg, candidates...)
		if err != nil {
			return nil, err
		}
		paths[i] = p
	}
	return paths, nil
}

func findBin(pkg string, candidates ...string) (string, error) {
	for _, c := range candidates {
		if filepath.IsAbs(c) {
			if _, err := os.Stat(c); err == nil {
				return c, nil
			}
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s not found; install Debian's %s package (apt-get install -y %s)", ErrNotInstalled, filepath.Base(candidates[0]), pkg, pkg)
}
