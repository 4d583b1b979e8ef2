package fence

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lockraft/lockraft/internal/sqlserver"
	_ "modernc.org/sqlite" // driver "sqlite"
)

// A testDB is one database the SQL tests run against. open returns a
// fresh, empty database (a new file for SQLite, a new schema/database on
// the shared server) and the DSN-level handle; every call of open gives a
// new *sql.DB (a new pool of connections) on that same database.
type testDB struct {
	name    string
	dialect Dialect
	// fresh creates an empty database and returns a func that opens a new
	// pool on it.
	fresh func(t *testing.T) func() *sql.DB
	// isolation is the query that shows the default isolation level, and
	// want what it must say (the claim is "correct at the default").
	isolation, want string
}

// A sharedServer is a database server every test of the binary shares
// (startServers), each test on a database of its own (ownDatabase).
type sharedServer struct {
	srv *sqlserver.Server
	err error // why it is not running
}

var servers struct {
	once      sync.Once
	pg, maria sharedServer
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range []sharedServer{servers.pg, servers.maria} {
		if s.srv != nil {
			s.srv.Stop()
		}
	}
	os.Exit(code)
}

// startServers starts PostgreSQL and MariaDB once per test binary (at the
// first test that needs them), in parallel.
func startServers() {
	servers.once.Do(func() {
		var wg sync.WaitGroup
		wg.Go(func() {
			if servers.pg.err = sqlserver.PostgresAvailable(); servers.pg.err == nil {
				servers.pg.srv, servers.pg.err = sqlserver.StartPostgres(sqlserver.Options{})
			}
		})
		wg.Go(func() {
			if servers.maria.err = sqlserver.MariaDBAvailable(); servers.maria.err == nil {
				servers.maria.srv, servers.maria.err = sqlserver.StartMariaDB(sqlserver.Options{})
			}
		})
		wg.Wait()
	})
}

// skipOrFail skips a test whose server is not installed, unless
// LOCKRAFT_REQUIRE_DBS is set (.ci/run sets it once it has installed them):
// then a missing server is a failure, not a silent skip.
func skipOrFail(t *testing.T, format string, a ...any) {
	t.Helper()
	if os.Getenv("LOCKRAFT_REQUIRE_DBS") != "" {
		t.Fatalf("LOCKRAFT_REQUIRE_DBS is set but "+format, a...)
	}
	t.Skipf(format, a...)
}

var dbSeq struct {
	mu sync.Mutex
	n  int
}

func nextDBName(t *testing.T) string {
	dbSeq.mu.Lock()
	defer dbSeq.mu.Unlock()
	dbSeq.n++
	t.Logf("database fence_t%d", dbSeq.n)
	return fmt.Sprintf("fence_t%d", dbSeq.n)
}

// ownDatabase starts the shared servers (once) and creates a database of
// the test's own on s; it returns the new database's name and s's DSN. The
// test is skipped, naming the server (what) and its Debian package (pkg),
// when s is not running.
func ownDatabase(t *testing.T, s *sharedServer, what, pkg string) (name, dsn string) {
	t.Helper()
	startServers()
	if s.err != nil {
		skipOrFail(t, "%s tests skipped (Debian package %s): %v", what, pkg, s.err)
	}
	name = nextDBName(t)
	admin, err := s.srv.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	return name, s.srv.DSN
}

// opener is a testDB's fresh: each call opens a *sql.DB on dsn, closed when
// the test ends.
func opener(t *testing.T, driver, dsn string) func() *sql.DB {
	return func() *sql.DB {
		db, err := sql.Open(driver, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
}

func sqliteDB() testDB {
	return testDB{name: "sqlite", dialect: SQLite, isolation: "PRAGMA read_uncommitted", want: "0",
		fresh: func(t *testing.T) func() *sql.DB {
			// Defaults but a busy timeout (without one a second writer fails
			// at once instead of waiting) and WAL; deferred transactions.
			dsn := "file:" + filepath.Join(t.TempDir(), "fence.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
			return opener(t, "sqlite", dsn)
		}}
}

func postgresDB() testDB {
	return testDB{name: "postgres", dialect: Postgres, isolation: "SHOW default_transaction_isolation", want: "read committed",
		fresh: func(t *testing.T) func() *sql.DB {
			name, dsn := ownDatabase(t, &servers.pg, "PostgreSQL", "postgresql")
			return opener(t, "pgx", strings.Replace(dsn, "/postgres?", "/"+name+"?", 1))
		}}
}

func mariaDB() testDB {
	return testDB{name: "mariadb", dialect: MySQL, isolation: "SELECT @@tx_isolation", want: "REPEATABLE-READ",
		fresh: func(t *testing.T) func() *sql.DB {
			name, dsn := ownDatabase(t, &servers.maria, "MariaDB", "mariadb-server")
			return opener(t, "mysql", strings.Replace(dsn, "/lockraft", "/"+name, 1))
		}}
}

func allDBs() []testDB { return []testDB{sqliteDB(), postgresDB(), mariaDB()} }

// checkDefaultIsolation fails the test unless the database runs at its
// default isolation level (the package's claim is about that level).
func checkDefaultIsolation(t *testing.T, d testDB, db *sql.DB) {
	t.Helper()
	var got string
	if err := db.QueryRowContext(context.Background(), d.isolation).Scan(&got); err != nil {
		t.Fatalf("%s: %v", d.isolation, err)
	}
	if got != d.want {
		t.Fatalf("%s = %q, want the default %q", d.isolation, got, d.want)
	}
	t.Logf("%s: %s = %s", d.name, d.isolation, got)
}
