package sqlserver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
)

const pgBin = "/usr/lib/postgresql/15/bin"

// PostgresAvailable returns nil if PostgreSQL 15's binaries are installed,
// else an error naming the package.
func PostgresAvailable() error {
	_, err := findBins("postgresql", postgresBins)
	return err
}

// postgresBins: the server and the program that creates its cluster.
var postgresBins = [][]string{{filepath.Join(pgBin, "postgres"), "postgres"}, {filepath.Join(pgBin, "initdb"), "initdb"}}

// StartPostgres creates a cluster with initdb in a fresh temp directory and
// runs the postgres binary itself (no pg_ctl, no service) on a free
// loopback port, its socket in the same directory. PostgreSQL refuses to run
// as root, so as root both run as the "postgres" account the package
// creates, with the directory handed to it. Authentication is trust on
// loopback; the database is "postgres", user "postgres".
func StartPostgres(opts Options) (_ *Server, err error) {
	bins, err := findBins("postgresql", postgresBins)
	if err != nil {
		return nil, err
	}
	postgres, initdb := bins[0], bins[1]
	uid, gid, sw, err := runAs("postgres")
	if err != nil {
		return nil, err
	}
	s, data, err := newServer("postgres", "pgx")
	if err != nil {
		return nil, err
	}
	defer s.killOnError(&err)
	dir := s.Dir
	cred := func(c *exec.Cmd) *exec.Cmd {
		if sw {
			c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
		}
		c.Dir = dir
		return c
	}
	if sw {
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, err
		}
		if err := chownTree(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	initArgs := []string{"-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"}
	if !opts.Durable {
		initArgs = append(initArgs, "--no-sync")
	}
	if out, err := cred(exec.Command(initdb, initArgs...)).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + dir, "-c", "max_connections=200", "-c", "logging_collector=off"}
	if !opts.Durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	s.DSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	s.URL = s.DSN
	if err := s.start(cred(exec.Command(postgres, args...)), opts, func() error { return ping("pgx", s.DSN) }); err != nil {
		return nil, err
	}
	return s, nil
}
