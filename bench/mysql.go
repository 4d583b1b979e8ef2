package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/lockraft/lockraft/internal/sqlserver"
)

// The two MySQL locks the articles teach, on one MariaDB 10.11 server from
// Debian's package (mariadb-server), started by the bench as a child process
// on loopback in a temp dir with its default durability (InnoDB, redo log
// flushed at every commit, REPEATABLE READ), stopped by PID:
//
//   - mysql-lock-table: a table of lock rows, name as the primary key, with
//     an owner and an expiry column. Lock INSERTs the row; a duplicate key
//     means held: it then tries to take the row over if it has expired
//     (UPDATE … WHERE expires_at < NOW(6)), else polls (1–5 ms, as the
//     redis system). Unlock DELETEs its own row. Each statement commits on
//     its own. Expiry is the server's clock, so a crashed holder's lock is
//     taken over after the TTL.
//   - mysql-for-update: a row per lock name; Lock opens a transaction and
//     SELECTs the row FOR UPDATE (creating it first if missing), and the
//     transaction stays open for the critical section; Unlock commits. A
//     waiter blocks inside InnoDB (no polling); a holder whose connection
//     dies loses the lock when the server notices (its transaction rolls
//     back); one that hangs with its connection open holds it forever.
//     Each caller needs its own connection for as long as it holds.
func init() {
	for name, kind := range map[string]mysqlKind{"mysql-lock-table": mysqlLockTable, "mysql-for-update": mysqlForUpdate} {
		register(systemFactory{
			name:          name,
			available:     sqlserver.MariaDBAvailable,
			start:         func(dir string, ttl time.Duration) (system, error) { return startMySQL(ttl, kind) },
			crashTakeover: func(dir string, ttl time.Duration) (time.Duration, error) { return mysqlCrashTakeover(ttl, kind) },
		})
	}
}

type mysqlKind int

const (
	mysqlLockTable mysqlKind = iota
	mysqlForUpdate
)

// holderNets numbers the per-holder dialers of S4.
var holderNets atomic.Int64

// trackedNet registers a dialer under a new network name that remembers
// the connections it makes, so that S4 can cut one holder's connections as
// its process's death would (and no one else's: -quick runs the S4s of all
// systems at once).
func trackedNet() (network string, conns func() []net.Conn) {
	network = fmt.Sprintf("benchholder%d", holderNets.Add(1))
	var mu sync.Mutex
	var all []net.Conn
	mysql.RegisterDialContext(network, func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			mu.Lock()
			all = append(all, c)
			mu.Unlock()
		}
		return c, err
	})
	return network, func() []net.Conn { mu.Lock(); defer mu.Unlock(); return append([]net.Conn(nil), all...) }
}

type mysqlSystem struct {
	srv  *sqlserver.Server
	db   *sql.DB // shared pool (as a service would have)
	dsn  string
	kind mysqlKind
	ttl  time.Duration
}

func startMySQL(ttl time.Duration, kind mysqlKind) (*mysqlSystem, error) {
	srv, err := sqlserver.StartMariaDB(sqlserver.Options{Durable: true})
	if err != nil {
		return nil, err
	}
	dsn := srv.DSN
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		srv.Stop()
		return nil, err
	}
	db.SetMaxOpenConns(256)
	db.SetMaxIdleConns(256)
	s := &mysqlSystem{srv: srv, db: db, dsn: dsn, kind: kind, ttl: ttl}
	for _, q := range []string{
		"CREATE TABLE IF NOT EXISTS locks (name VARCHAR(191) NOT NULL PRIMARY KEY, owner VARCHAR(64) NOT NULL, expires_at DATETIME(6) NOT NULL) ENGINE=InnoDB",
		"CREATE TABLE IF NOT EXISTS mutex (name VARCHAR(191) NOT NULL PRIMARY KEY) ENGINE=InnoDB",
	} {
		if _, err := db.Exec(q); err != nil {
			s.stop()
			return nil, err
		}
	}
	return s, nil
}

func (s *mysqlSystem) stop() {
	s.db.Close()
	s.srv.Stop()
}

func (s *mysqlSystem) caller(int) (caller, error) {
	return &mysqlCaller{db: s.db, kind: s.kind, ttl: s.ttl}, nil
}

type mysqlCaller struct {
	db   *sql.DB
	kind mysqlKind
	ttl  time.Duration
}

func (c *mysqlCaller) close() {}

func (c *mysqlCaller) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	if c.kind == mysqlForUpdate {
		return c.lockForUpdate(ctx, name)
	}
	return c.lockTable(ctx, name)
}

func isDuplicate(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}

// isBusy: InnoDB gave up on the statement (deadlock, lock wait timeout);
// nothing was written, and a lock-table client treats it as "held, retry".
func isBusy(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// lockTable: INSERT the row; on a duplicate take it over if expired, else
// poll.
func (c *mysqlCaller) lockTable(ctx context.Context, name string) (func(context.Context) error, error) {
	owner := randomToken()
	ttlUS := c.ttl.Microseconds()
	for {
		_, err := c.db.ExecContext(ctx, "INSERT INTO locks (name, owner, expires_at) VALUES (?, ?, NOW(6) + INTERVAL ? MICROSECOND)", name, owner, ttlUS)
		if err == nil {
			break
		}
		if !isDuplicate(err) && !isBusy(err) {
			return nil, err
		}
		if !isBusy(err) {
			res, err := c.db.ExecContext(ctx, "UPDATE locks SET owner = ?, expires_at = NOW(6) + INTERVAL ? MICROSECOND WHERE name = ? AND expires_at < NOW(6)", owner, ttlUS, name)
			if err != nil && !isBusy(err) {
				return nil, err
			}
			if err == nil {
				if n, _ := res.RowsAffected(); n == 1 {
					break
				}
			}
		}
		d := redisRetryMin + rand.N(redisRetryMax-redisRetryMin)
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(d):
		}
	}
	return func(ctx context.Context) error {
		res, err := c.db.ExecContext(ctx, "DELETE FROM locks WHERE name = ? AND owner = ?", name, owner)
		if err == nil {
			if n, _ := res.RowsAffected(); n != 1 {
				err = errors.New("lock was not held")
			}
		}
		return err
	}, nil
}

// lockForUpdate: make sure the row exists, then BEGIN; SELECT … FOR UPDATE
// and keep the transaction (and its connection) until Unlock commits.
func (c *mysqlCaller) lockForUpdate(ctx context.Context, name string) (func(context.Context) error, error) {
	if _, err := c.db.ExecContext(ctx, "INSERT IGNORE INTO mutex (name) VALUES (?)", name); err != nil {
		return nil, err
	}
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	var got string
	if err := tx.QueryRowContext(ctx, "SELECT name FROM mutex WHERE name = ? FOR UPDATE", name).Scan(&got); err != nil {
		tx.Rollback()
		return nil, err
	}
	return func(context.Context) error { return tx.Commit() }, nil
}

// mysqlCrashTakeover: the holder takes the lock on its own pool and "dies":
// its TCP connections are closed under it (as the kernel does for a killed
// process) and it never unlocks; a waiter on the shared pool is granted
// when the lock row expires (lock table) or when the server has rolled the
// dead connection's transaction back (FOR UPDATE).
func mysqlCrashTakeover(ttl time.Duration, kind mysqlKind) (time.Duration, error) {
	s, err := startMySQL(ttl, kind)
	if err != nil {
		return 0, err
	}
	defer s.stop()
	network, holderConns := trackedNet()
	hdb, err := sql.Open("mysql", strings.Replace(s.dsn, "@tcp(", "@"+network+"(", 1))
	if err != nil {
		return 0, err
	}
	defer hdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), ttl+30*time.Second)
	defer cancel()
	holder := &mysqlCaller{db: hdb, kind: kind, ttl: ttl}
	if _, err := holder.lock(ctx, "s4/crash"); err != nil {
		return 0, err
	}
	dead := holderConns()
	waiter := &mysqlCaller{db: s.db, kind: kind, ttl: ttl}
	got := waitGrant(ctx, waiter, "s4/crash")
	time.Sleep(300 * time.Millisecond) // the waiter is waiting
	t0 := time.Now()
	for _, c := range dead {
		c.Close()
	}
	return (<-got).since(t0)
}
