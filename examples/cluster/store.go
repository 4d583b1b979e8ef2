package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	_ "github.com/go-sql-driver/mysql" // -db mysql://…
	_ "github.com/jackc/pgx/v5/stdlib" // -db postgres://…
	_ "modernc.org/sqlite"             // the default: a SQLite file, pure Go

	"github.com/lockraft/lockraft/fence"
)

// ErrStale is the store's answer to a write whose fencing token is lower
// than the highest the database has accepted for that SKU.
var ErrStale = fence.ErrStaleToken

// Resource is what the workers protect with the lock: the stock of each SKU.
// Every call carries the lock's fencing token.
type Resource interface {
	// Enter starts a critical section and reads the stock (a fenced read).
	Enter(sku string, token, node, leader uint64) (stock int, err error)
	// Write sets the stock (a fenced write).
	Write(sku string, token uint64, stock int) error
	// Exit ends the critical section Enter started.
	Exit(sku string, token uint64) error
	// Highest is the highest token the database has accepted for sku.
	Highest(sku string) (uint64, error)
}

// Store keeps the stock in a SQL database and fences every read and write
// with fence.Guard: each is one transaction that first raises the SKU's row
// in the fence table (cluster_fences, keyed by the lock's name) to the
// token, or fails with fence.ErrStaleToken. Besides the stock it keeps an
// audit that does not trust the fence: the critical sections open at once
// (overlaps), whether each write is "stock read under this token, minus
// one" (bad writes), and a log of every sale with its token
// (cluster_sales), so that a stale write accepted shows as a token lower
// than an earlier sale's. Every node process opens the same database.
type Store struct {
	db      *sql.DB
	g       *fence.Guard
	dialect fence.Dialect
	what    string // for messages: "SQLite file …", "PostgreSQL at …"
	url     string // what OpenStore was given (node processes open the same)

	// Parent side of -kill only: SKUs whose section was open in a killed
	// process, and what happened next.
	mu        sync.Mutex
	recovered []string
}

// dbURL turns -db's value into a driver, a DSN and a dialect:
//
//	sqlite:/path/to/file.db       (the default: a file in the demo's temp dir)
//	postgres://user@host:5432/db?sslmode=disable
//	mysql://user:pass@host:3306/db
func dbURL(raw string) (driver, dsn string, d fence.Dialect, what string, err error) {
	switch {
	case strings.HasPrefix(raw, "sqlite:"):
		path := strings.TrimPrefix(raw, "sqlite:")
		// WAL lets readers run beside the one writer; the busy timeout
		// makes a second writer (another node process) wait its turn.
		return "sqlite", "file:" + path + "?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)", fence.SQLite, "SQLite file " + path, nil
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		u, _ := url.Parse(raw)
		return "pgx", raw, fence.Postgres, "PostgreSQL at " + u.Host, nil
	case strings.HasPrefix(raw, "mysql://"), strings.HasPrefix(raw, "mariadb://"):
		u, perr := url.Parse(raw)
		if perr != nil {
			return "", "", fence.Dialect{}, "", perr
		}
		cred := u.User.Username()
		if p, ok := u.User.Password(); ok {
			cred += ":" + p
		}
		dsn = fmt.Sprintf("%s@tcp(%s)%s", cred, u.Host, u.Path)
		if u.RawQuery != "" {
			dsn += "?" + u.RawQuery
		}
		return "mysql", dsn, fence.MySQL, "MySQL/MariaDB at " + u.Host, nil
	}
	return "", "", fence.Dialect{}, "", fmt.Errorf("-db %q: want sqlite:PATH, postgres://… or mysql://…", raw)
}

// OpenStore connects to the database named by raw (see dbURL).
func OpenStore(raw string) (*Store, error) {
	driver, dsn, d, what, err := dbURL(raw)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, err
	}
	if d == fence.SQLite {
		// One connection per process: goroutines queue in database/sql
		// rather than in SQLite's busy-wait sleeps.
		db.SetMaxOpenConns(1)
	} else {
		db.SetMaxOpenConns(32)
		db.SetMaxIdleConns(32)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	g, err := fence.NewGuard(db, d, fence.WithTable("cluster_fences"), fence.WithRetries(20))
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Store{db: db, g: g, dialect: d, what: what, url: raw}, nil
}

// Close closes the connection pool.
func (s *Store) Close() error { return s.db.Close() }

// Init replaces the demo's tables (cluster_*) with fresh ones and stocks
// each SKU with initial units. The fence table is new too: a fresh cluster's
// tokens start low again, and the old run's fences would refuse them.
func (s *Store) Init(skus []string, initial int) error {
	ctx := context.Background()
	for _, t := range []string{"cluster_sales", "cluster_sections", "cluster_skus", "cluster_fences"} {
		if _, err := s.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
			return err
		}
	}
	if err := s.g.CreateTable(ctx); err != nil {
		return err
	}
	cols := []string{"initial_stock", "stock", "sold", "ops", "inside", "overlapping", "max_inside", "stale_rejected",
		"stale_accepted", "bad_writes", "handoffs", "holder", "last_node", "last_written", "leader"}
	for _, q := range []string{
		"CREATE TABLE cluster_skus (sku VARCHAR(64) NOT NULL PRIMARY KEY, " + strings.Join(cols, " BIGINT NOT NULL DEFAULT 0, ") + " BIGINT NOT NULL DEFAULT 0)",
		"CREATE TABLE cluster_sections (sku VARCHAR(64) NOT NULL, token BIGINT NOT NULL, node BIGINT NOT NULL, read_stock BIGINT NOT NULL, PRIMARY KEY (sku, token))",
		"CREATE TABLE cluster_sales (sku VARCHAR(64) NOT NULL, seq BIGINT NOT NULL, token BIGINT NOT NULL, stock_after BIGINT NOT NULL, PRIMARY KEY (sku, seq))",
	} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	for _, k := range skus {
		if _, err := s.db.ExecContext(ctx, s.dialect.Rebind("INSERT INTO cluster_skus (sku, initial_stock, stock) VALUES (?, ?, ?)"), k, initial, initial); err != nil {
			return err
		}
	}
	return nil
}

func lockName(sku string) string { return "stock/" + sku }

func (s *Store) exec(ctx context.Context, tx *sql.Tx, q string, args ...any) error {
	_, err := tx.ExecContext(ctx, s.dialect.Rebind(q), args...)
	return err
}

// countRejected notes a refused request (its own transaction: the refused
// one wrote nothing).
func (s *Store) countRejected(sku string) {
	s.db.Exec(s.dialect.Rebind("UPDATE cluster_skus SET stale_rejected = stale_rejected + 1 WHERE sku = ?"), sku)
}

func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// Enter implements Resource. The assignments that read inside and
// last_node come before the ones that change them: MySQL evaluates SET
// left to right with the new values, PostgreSQL and SQLite with the old.
func (s *Store) Enter(k string, token, node, leader uint64) (int, error) {
	ctx, cancel := opCtx()
	defer cancel()
	var stock int
	err := s.g.Tx(ctx, lockName(k), token, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, s.dialect.Rebind("SELECT stock FROM cluster_skus WHERE sku = ?"), k).Scan(&stock); err != nil {
			return err
		}
		if err := s.exec(ctx, tx, `UPDATE cluster_skus SET ops = ops + 1,
			overlapping = overlapping + CASE WHEN inside > 0 THEN 1 ELSE 0 END,
			max_inside = CASE WHEN inside + 1 > max_inside THEN inside + 1 ELSE max_inside END,
			inside = inside + 1,
			handoffs = handoffs + CASE WHEN last_node <> 0 AND last_node <> ? THEN 1 ELSE 0 END,
			last_node = ?, holder = ?, leader = CASE WHEN ? <> 0 THEN ? ELSE leader END
			WHERE sku = ?`, int64(node), int64(node), int64(node), int64(leader), int64(leader), k); err != nil {
			return err
		}
		return s.exec(ctx, tx, "INSERT INTO cluster_sections (sku, token, node, read_stock) VALUES (?, ?, ?, ?)", k, int64(token), int64(node), stock)
	})
	if errors.Is(err, fence.ErrStaleToken) {
		s.countRejected(k)
	}
	return stock, err
}

// Write implements Resource.
func (s *Store) Write(k string, token uint64, stock int) error {
	ctx, cancel := opCtx()
	defer cancel()
	err := s.g.Tx(ctx, lockName(k), token, func(tx *sql.Tx) error {
		var cur, sold int64
		if err := tx.QueryRowContext(ctx, s.dialect.Rebind("SELECT stock, sold FROM cluster_skus WHERE sku = ?"), k).Scan(&cur, &sold); err != nil {
			return err
		}
		// Audit, independent of the fence: the write must be "stock read
		// under this token, minus one", and the stock must not have moved
		// since that read.
		var read int64
		bad := 0
		err := tx.QueryRowContext(ctx, s.dialect.Rebind("SELECT read_stock FROM cluster_sections WHERE sku = ? AND token = ?"), k, int64(token)).Scan(&read)
		if err != nil || int64(stock) != read-1 || read != cur {
			bad = 1
		}
		if err := s.exec(ctx, tx, `UPDATE cluster_skus SET
			stale_accepted = stale_accepted + CASE WHEN last_written > ? THEN 1 ELSE 0 END,
			bad_writes = bad_writes + ?, last_written = ?, stock = ?, sold = sold + 1
			WHERE sku = ?`, int64(token), bad, int64(token), stock, k); err != nil {
			return err
		}
		return s.exec(ctx, tx, "INSERT INTO cluster_sales (sku, seq, token, stock_after) VALUES (?, ?, ?, ?)", k, sold+1, int64(token), stock)
	})
	if errors.Is(err, fence.ErrStaleToken) {
		s.countRejected(k)
	}
	return err
}

// Exit implements Resource.
func (s *Store) Exit(k string, token uint64) error {
	ctx, cancel := opCtx()
	defer cancel()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, s.dialect.Rebind("DELETE FROM cluster_sections WHERE sku = ? AND token = ?"), k, int64(token))
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 1 { // 0: a killed process's section, already closed by Abandon
		if err := s.exec(ctx, tx, "UPDATE cluster_skus SET holder = CASE WHEN inside = 1 THEN 0 ELSE holder END, inside = inside - 1 WHERE sku = ?", k); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Highest implements Resource: the SKU's fence, read from the fence table.
func (s *Store) Highest(k string) (uint64, error) {
	var f int64
	err := s.db.QueryRow(s.dialect.Rebind("SELECT fence FROM cluster_fences WHERE resource = ?"), lockName(k)).Scan(&f)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return uint64(f), err
}

// Abandon closes the critical sections of a node whose process was killed
// (a dead process is inside nothing) and returns the SKUs it was inside;
// for each it then watches for the next holder's first fenced entry.
func (s *Store) Abandon(node uint64) ([]string, error) {
	ctx, cancel := opCtx()
	defer cancel()
	killed := time.Now()
	rows, err := s.db.QueryContext(ctx, s.dialect.Rebind("SELECT sku, token FROM cluster_sections WHERE node = ?"), int64(node))
	if err != nil {
		return nil, err
	}
	type sec struct {
		sku   string
		token int64
	}
	var secs []sec
	for rows.Next() {
		var x sec
		if err := rows.Scan(&x.sku, &x.token); err != nil {
			rows.Close()
			return nil, err
		}
		secs = append(secs, x)
	}
	rows.Close()
	var out []string
	for _, x := range secs {
		if err := s.Exit(x.sku, uint64(x.token)); err != nil {
			return nil, err
		}
		out = append(out, x.sku)
		go s.watchRecovery(x.sku, uint64(x.token), killed)
	}
	sort.Strings(out)
	return out, nil
}

// watchRecovery waits until someone enters sku with a token above the
// killed holder's and notes who and when.
func (s *Store) watchRecovery(sku string, killedToken uint64, at time.Time) {
	for time.Since(at) < time.Minute {
		if h, err := s.Highest(sku); err == nil && h > killedToken {
			var node int64
			s.db.QueryRow(s.dialect.Rebind("SELECT last_node FROM cluster_skus WHERE sku = ?"), sku).Scan(&node)
			s.mu.Lock()
			s.recovered = append(s.recovered, fmt.Sprintf("%s: next holder (node %d, token %d) entered %.1fs after the kill", sku, node, h, time.Since(at).Seconds()))
			s.mu.Unlock()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// skuState is the database's book for one SKU.
type skuState struct {
	Initial       int
	Stock         int
	Sold          int // accepted writes
	Ops           int
	Overlaps      int    // Enter while another section was open
	MaxInside     int    // most sections open at once
	Rejected      int    // requests refused for a stale token
	StaleAccepted int    // audit: accepted write older than an earlier accepted one (column, plus the sales log's order)
	BadWrites     int    // audit: a write that was not "stock read under this token, minus one"
	Handoffs      int    // holder moved to another node
	Holder        uint64 // node inside now (0: none)
	LastNode      uint64 // node that entered last
	Leader        uint64
	SalesLogged   int // rows in the sales log (Final only)
}

// Snapshot is the database's books, read in one query.
type Snapshot struct {
	SKUs      map[string]skuState
	Leader    uint64
	Recovered []string
	Store     string
}

// Snapshot reads the books.
func (s *Store) Snapshot() (Snapshot, error) {
	snap := Snapshot{SKUs: map[string]skuState{}, Store: s.what}
	rows, err := s.db.Query(`SELECT sku, initial_stock, stock, sold, ops, overlapping, max_inside, stale_rejected, stale_accepted,
		bad_writes, handoffs, holder, last_node, leader FROM cluster_skus`)
	if err != nil {
		return snap, err
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var st skuState
		if err := rows.Scan(&k, &st.Initial, &st.Stock, &st.Sold, &st.Ops, &st.Overlaps, &st.MaxInside, &st.Rejected,
			&st.StaleAccepted, &st.BadWrites, &st.Handoffs, &st.Holder, &st.LastNode, &st.Leader); err != nil {
			return snap, err
		}
		snap.SKUs[k] = st
		snap.Leader = max(snap.Leader, st.Leader)
	}
	s.mu.Lock()
	snap.Recovered = append([]string(nil), s.recovered...)
	s.mu.Unlock()
	return snap, rows.Err()
}

// Final is Snapshot plus the sales log's audit: the log's rows per SKU, and
// every sale whose token is lower than an earlier sale's counted as a stale
// write accepted.
func (s *Store) Final() (Snapshot, error) {
	snap, err := s.Snapshot()
	if err != nil {
		return snap, err
	}
	rows, err := s.db.Query("SELECT sku, token FROM cluster_sales ORDER BY sku, seq")
	if err != nil {
		return snap, err
	}
	defer rows.Close()
	high := map[string]int64{}
	for rows.Next() {
		var k string
		var tok int64
		if err := rows.Scan(&k, &tok); err != nil {
			return snap, err
		}
		st := snap.SKUs[k]
		st.SalesLogged++
		if tok < high[k] {
			st.StaleAccepted++
		}
		high[k] = max(high[k], tok)
		snap.SKUs[k] = st
	}
	return snap, rows.Err()
}

// SoldOut reports whether every SKU's stock is zero.
func (snap Snapshot) SoldOut() bool {
	for _, st := range snap.SKUs {
		if st.Stock > 0 {
			return false
		}
	}
	return true
}

// Totals sums ops, handoffs and sold units over the SKUs.
func (snap Snapshot) Totals() (ops, handoffs, sold int) {
	for _, st := range snap.SKUs {
		ops += st.Ops
		handoffs += st.Handoffs
		sold += st.Sold
	}
	return
}

// openDemoStore opens -db, or a SQLite file in dir, and stocks it.
func openDemoStore(dir string, skus []string) (*Store, error) {
	raw := *flagDB
	if raw == "" {
		raw = "sqlite:" + filepath.Join(dir, "store.db")
	}
	s, err := OpenStore(raw)
	if err != nil {
		return nil, err
	}
	if err := s.Init(skus, *flagStock); err != nil {
		s.Close()
		return nil, fmt.Errorf("%s: %w", s.what, err)
	}
	fmt.Printf("store: %s, fenced by package fence\n", s.what)
	return s, nil
}
