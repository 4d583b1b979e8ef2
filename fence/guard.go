package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
)

// DefaultTable is the fence table's name unless WithTable says otherwise.
const DefaultTable = "lockraft_fences"

// Guard applies writes to a SQL database only under a token that is not
// stale. It is safe for concurrent use; it holds no state of its own beyond
// the *sql.DB (which the caller owns and closes).
type Guard struct {
	db      *sql.DB
	dialect Dialect
	table   string
	retries int

	// unguarded plants the bug the tests must catch: the fence condition
	// is replaced by one that is always true. Only tests set it.
	unguarded bool
}

// Option configures a Guard.
type Option func(*Guard)

// WithTable names the fence table (default DefaultTable). A plain SQL name,
// optionally schema-qualified.
func WithTable(name string) Option { return func(g *Guard) { g.table = name } }

// WithRetries sets how often Tx (and SQLStore's admission) retries a
// transaction the database aborted with nothing written (deadlock,
// serialization failure, SQLite busy); default 5, 0 disables.
func WithRetries(n int) Option { return func(g *Guard) { g.retries = n } }

// NewGuard returns a Guard for db, which speaks dialect. It does not touch
// the database; call CreateTable once if you use the fence table.
func NewGuard(db *sql.DB, dialect Dialect, opts ...Option) (*Guard, error) {
	g := &Guard{db: db, dialect: dialect, table: DefaultTable, retries: 5}
	for _, o := range opts {
		o(g)
	}
	if db == nil {
		return nil, invalid("nil *sql.DB")
	}
	if dialect.kind == kindNone {
		return nil, invalid("zero Dialect (use fence.Postgres, fence.MySQL or fence.SQLite)")
	}
	if g.retries < 0 {
		return nil, invalid("negative retries %d", g.retries)
	}
	if err := checkIdent("fence table", g.table); err != nil {
		return nil, err
	}
	return g, nil
}

// Dialect returns the guard's dialect.
func (g *Guard) Dialect() Dialect { return g.dialect }

// DB returns the guard's database.
func (g *Guard) DB() *sql.DB { return g.db }

// CreateTable creates the fence table if it does not exist. Idempotent.
func (g *Guard) CreateTable(ctx context.Context) error {
	_, err := g.db.ExecContext(ctx, g.dialect.createTable(g.table))
	return err
}

func checkToken(resource string, token uint64) (int64, error) {
	if resource == "" {
		return 0, invalid("empty resource")
	}
	if token == 0 || token > math.MaxInt64 {
		return 0, invalid("token %d out of range 1..2^63-1", token)
	}
	return int64(token), nil
}

// Check raises resource's fence to token inside tx, or returns a
// *StaleError (errors.Is ErrStaleToken) if the stored fence is higher. On
// success tx holds the fence row's lock until it ends, so every other
// fenced transaction on resource waits for it: make Check the first
// statement of tx (on MySQL and PostgreSQL a lock taken later would not
// undo what the transaction read before it). On a stale token the caller
// must roll tx back; Check itself wrote nothing. Any other error leaves tx
// unusable on some databases: roll it back.
func (g *Guard) Check(ctx context.Context, tx *sql.Tx, resource string, token uint64) error {
	t, err := checkToken(resource, token)
	if err != nil {
		return err
	}
	stmt, args := g.dialect.raiseFence(g.table, g.unguarded)
	if g.dialect.kind == kindMySQL {
		if _, err := tx.ExecContext(ctx, stmt, args(resource, t)...); err != nil {
			return fmt.Errorf("fence: raise %q: %w", resource, err)
		}
		var stored int64
		if err := tx.QueryRowContext(ctx, g.dialect.readFence(g.table), resource).Scan(&stored); err != nil {
			return fmt.Errorf("fence: read %q: %w", resource, err)
		}
		if stored != t {
			return &StaleError{Resource: resource, Token: token, Highest: uint64(stored)}
		}
		return nil
	}
	var stored int64
	err = tx.QueryRowContext(ctx, stmt, args(resource, t)...).Scan(&stored)
	if errors.Is(err, sql.ErrNoRows) {
		// The row exists with a higher fence and is now locked by tx.
		if err := tx.QueryRowContext(ctx, g.dialect.readFence(g.table), resource).Scan(&stored); err != nil {
			return &StaleError{Resource: resource, Token: token}
		}
		return &StaleError{Resource: resource, Token: token, Highest: uint64(stored)}
	}
	if err != nil {
		return fmt.Errorf("fence: raise %q: %w", resource, err)
	}
	return nil
}

// Tx runs fn in a transaction that first raises resource's fence to token
// (Check), then commits. A stale token returns a *StaleError without
// running fn. If fn returns an error the transaction is rolled back and the
// error returned. A transaction aborted by the database with nothing
// written (deadlock, serialization failure, SQLite busy) is retried from
// the start, up to the guard's retries, so fn may run more than once and
// must do all its work through tx. The transaction uses the database's
// default isolation level. A failed Commit (other than such an abort)
// leaves the outcome unknown.
func (g *Guard) Tx(ctx context.Context, resource string, token uint64, fn func(*sql.Tx) error) error {
	if _, err := checkToken(resource, token); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		err := g.txOnce(ctx, resource, token, fn)
		if err == nil || errors.Is(err, ErrStaleToken) || !retryable(err) || attempt >= g.retries || ctx.Err() != nil {
			return err
		}
	}
}

func (g *Guard) txOnce(ctx context.Context, resource string, token uint64, fn func(*sql.Tx) error) error {
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := g.Check(ctx, tx, resource, token); err != nil {
		tx.Rollback()
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// Execer is what Guard.Update runs its statements on: a *sql.DB, *sql.Tx
// or *sql.Conn.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Update is one conditional UPDATE of a row that keeps its own fence
// column (BIGINT NOT NULL DEFAULT 0). Set and Where are SQL fragments with ?
// placeholders (rewritten for PostgreSQL); Args holds Set's arguments, then
// Where's. Where must select exactly one row (by its key).
//
//	fence.Update{Table: "stock", FenceColumn: "fence",
//		Set: "qty = qty - ?", Where: "sku = ?", Args: []any{1, "sku-42"}}
//
// becomes UPDATE stock SET qty = qty - ?, fence = <token> WHERE (sku = ?)
// AND fence <= <token>.
type Update struct {
	Table       string
	FenceColumn string
	Set         string
	Where       string
	Args        []any
}

// Update applies u under token in one statement: the write and the new
// fence land together, or nothing changes. It returns the rows affected, a
// *StaleError (errors.Is ErrStaleToken) if the row's fence is higher than
// token, or ErrNoRow if Where matched nothing. On MySQL a write that
// changes no value reports 0 rows and no error. db may be a *sql.DB (the
// statement commits on its own) or a transaction. An error for which
// IsRetryable is true (a deadlock, SQLite busy) wrote nothing.
func (g *Guard) Update(ctx context.Context, db Execer, u Update, token uint64) (int64, error) {
	t, err := checkToken(u.Table, token)
	if err != nil {
		return 0, err
	}
	if err := checkIdent("table", u.Table); err != nil {
		return 0, err
	}
	if err := checkIdent("fence column", u.FenceColumn); err != nil {
		return 0, err
	}
	if strings.TrimSpace(u.Set) == "" || strings.TrimSpace(u.Where) == "" {
		return 0, invalid("Update needs Set and Where")
	}
	nSet, nWhere := placeholders(u.Set), placeholders(u.Where)
	if nSet+nWhere != len(u.Args) {
		return 0, invalid("Set and Where have %d placeholders, Args has %d values", nSet+nWhere, len(u.Args))
	}
	cond := u.FenceColumn + " <= ?"
	if g.unguarded {
		cond = "? > 0"
	}
	stmt := g.dialect.Rebind("UPDATE " + u.Table + " SET " + u.Set + ", " + u.FenceColumn + " = ? WHERE (" + u.Where + ") AND " + cond)
	args := make([]any, 0, len(u.Args)+2)
	args = append(args, u.Args[:nSet]...)
	args = append(args, t)
	args = append(args, u.Args[nSet:]...)
	args = append(args, t)
	res, err := db.ExecContext(ctx, stmt, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil || n > 0 {
		return n, err
	}
	// Nothing changed: stale, no such row, or (MySQL) the same values
	// written again. The fence only ever rises, so a fence not above token
	// now was not above it when the UPDATE ran.
	var stored int64
	q := g.dialect.Rebind("SELECT " + u.FenceColumn + " FROM " + u.Table + " WHERE " + u.Where)
	err = db.QueryRowContext(ctx, q, u.Args[nSet:]...).Scan(&stored)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, ErrNoRow
	case err != nil:
		return 0, err
	case stored > t:
		return 0, &StaleError{Resource: u.Table, Token: token, Highest: uint64(stored)}
	}
	return 0, nil
}
