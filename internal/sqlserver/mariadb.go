package sqlserver

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	_ "github.com/go-sql-driver/mysql" // driver "mysql"
)

// MariaDBAvailable returns nil if MariaDB's server binaries are installed,
// else an error naming the package.
func MariaDBAvailable() error {
	_, err := findBins("mariadb-server", mariadbBins)
	return err
}

// mariadbBins: the server and the program that creates its data directory.
var mariadbBins = [][]string{{"/usr/sbin/mariadbd", "mariadbd"}, {"/usr/bin/mariadb-install-db", "mariadb-install-db"}}

// StartMariaDB creates a data directory with mariadb-install-db in a fresh
// temp directory and runs mariadbd on a free loopback port with its socket,
// pid file and error log in that directory (--no-defaults: nothing from
// /etc/mysql). mariadbd refuses to run as root unless told so: as root both
// get --user=root (the directory stays root's). It then creates database
// "lockraft" and user lockraft@'%' without a password, and DSN connects as
// that user over TCP. InnoDB, default isolation (REPEATABLE READ).
func StartMariaDB(opts Options) (_ *Server, err error) {
	bins, err := findBins("mariadb-server", mariadbBins)
	if err != nil {
		return nil, err
	}
	mariadbd, install := bins[0], bins[1]
	s, data, err := newServer("mariadb", "mysql")
	if err != nil {
		return nil, err
	}
	defer s.killOnError(&err)
	dir := s.Dir
	sock := filepath.Join(dir, "mysqld.sock")
	var userArgs []string
	if os.Geteuid() == 0 {
		userArgs = []string{"--user=root"}
	}
	installArgs := append([]string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal",
		"--skip-test-db"}, userArgs...)
	cmd := exec.Command(install, installArgs...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mariadb-install-db: %v\n%s", err, out)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{"--no-defaults", "--datadir=" + data, "--socket=" + sock, "--port=" + strconv.Itoa(port),
		"--bind-address=127.0.0.1", "--pid-file=" + filepath.Join(dir, "mysqld.pid"), "--log-error=" + s.logPath,
		"--skip-name-resolve", "--performance-schema=OFF", "--max-connections=300", "--innodb-buffer-pool-size=128M"}, userArgs...)
	if !opts.Durable {
		args = append(args, "--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0", "--innodb-doublewrite=0")
	}
	rootDSN := "root@unix(" + sock + ")/"
	s.DSN = fmt.Sprintf("lockraft@tcp(127.0.0.1:%d)/lockraft", port)
	s.URL = fmt.Sprintf("mysql://lockraft@127.0.0.1:%d/lockraft", port)
	cmd = exec.Command(mariadbd, args...)
	cmd.Dir = dir
	if err := s.start(cmd, opts, func() error { return ping("mysql", rootDSN) }); err != nil {
		return nil, err
	}
	root, err := sql.Open("mysql", rootDSN)
	if err != nil {
		s.Stop()
		return nil, err
	}
	defer root.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, q := range []string{
		"CREATE DATABASE IF NOT EXISTS lockraft",
		"CREATE USER IF NOT EXISTS 'lockraft'@'%'",
		"GRANT ALL PRIVILEGES ON *.* TO 'lockraft'@'%'",
	} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			s.Stop()
			return nil, fmt.Errorf("mariadb set-up %q: %w", q, err)
		}
	}
	return s, nil
}
