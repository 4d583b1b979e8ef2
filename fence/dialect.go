package fence

import (
	"iter"
	"regexp"
	"strconv"
	"strings"
)

// Dialect is the SQL spoken by the database behind a Guard. The
// differences that matter here are made explicit: placeholders (? or $n),
// the upsert (ON CONFLICT … DO UPDATE … WHERE, or ON DUPLICATE KEY UPDATE),
// and how the fence table's verdict is read back.
type Dialect struct{ kind dialectKind }

type dialectKind int

const (
	kindNone dialectKind = iota
	kindPostgres
	kindMySQL
	kindSQLite
)

var (
	// Postgres: PostgreSQL 9.5 or later ($n placeholders, ON CONFLICT).
	Postgres = Dialect{kindPostgres}
	// MySQL: MySQL or MariaDB with InnoDB (? placeholders, ON DUPLICATE KEY
	// UPDATE).
	MySQL = Dialect{kindMySQL}
	// SQLite: SQLite 3.35 or later (? placeholders, ON CONFLICT, RETURNING).
	SQLite = Dialect{kindSQLite}
)

func (d Dialect) String() string {
	switch d.kind {
	case kindPostgres:
		return "postgres"
	case kindMySQL:
		return "mysql"
	case kindSQLite:
		return "sqlite"
	}
	return "unknown"
}

// ParseDialect maps a name to a Dialect: "postgres", "postgresql", "pgx",
// "mysql", "mariadb", "sqlite", "sqlite3".
func ParseDialect(name string) (Dialect, error) {
	switch strings.ToLower(name) {
	case "postgres", "postgresql", "pgx":
		return Postgres, nil
	case "mysql", "mariadb":
		return MySQL, nil
	case "sqlite", "sqlite3":
		return SQLite, nil
	}
	return Dialect{}, invalid("unknown dialect %q", name)
}

// Rebind rewrites ? placeholders for the dialect: $1, $2, … for PostgreSQL,
// unchanged for the others. A ? inside '…', "…" or `…` is left alone.
func (d Dialect) Rebind(query string) string {
	if d.kind != kindPostgres {
		return query
	}
	var b strings.Builder
	n, done := 0, 0
	for i := range placeholderOffsets(query) {
		n++
		b.WriteString(query[done:i])
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(n))
		done = i + 1
	}
	b.WriteString(query[done:])
	return b.String()
}

// placeholders counts the ? placeholders outside quotes.
func placeholders(s string) int {
	n := 0
	for range placeholderOffsets(s) {
		n++
	}
	return n
}

// placeholderOffsets yields the offset of each ? in s that is outside '…',
// "…" and `…`.
func placeholderOffsets(s string) iter.Seq[int] {
	return func(yield func(int) bool) {
		var quote byte
		for i := 0; i < len(s); i++ {
			switch c := s[i]; {
			case quote != 0:
				if c == quote {
					quote = 0
				}
			case c == '\'' || c == '"' || c == '`':
				quote = c
			case c == '?':
				if !yield(i) {
					return
				}
			}
		}
	}
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// checkIdent accepts plain (optionally schema-qualified) SQL names only, so
// that names can be put into statements without quoting rules per dialect.
func checkIdent(what, name string) error {
	if !identRE.MatchString(name) {
		return invalid("%s %q is not a plain SQL name ([A-Za-z_][A-Za-z0-9_]*, optionally schema.name)", what, name)
	}
	return nil
}

// createTable is the fence table's DDL.
func (d Dialect) createTable(table string) string {
	switch d.kind {
	case kindMySQL:
		return "CREATE TABLE IF NOT EXISTS " + table +
			" (resource VARCHAR(255) NOT NULL PRIMARY KEY, fence BIGINT NOT NULL) ENGINE=InnoDB"
	case kindSQLite:
		return "CREATE TABLE IF NOT EXISTS " + table + " (resource TEXT NOT NULL PRIMARY KEY, fence INTEGER NOT NULL)"
	default:
		return "CREATE TABLE IF NOT EXISTS " + table + " (resource VARCHAR(255) NOT NULL PRIMARY KEY, fence BIGINT NOT NULL)"
	}
}

// raiseFence is the fence table's check-and-store: insert (resource,
// token), or raise the stored fence to token if it is not higher. cond is
// the guard's condition; a planted test variant replaces it with "true".
//
// PostgreSQL and SQLite: one statement that returns the stored fence only
// when it inserted or updated (RETURNING); no row back means stale.
// MySQL: the upsert, then verdict reads the stored fence with a locking
// read; accepted means it equals the token.
func (d Dialect) raiseFence(table string, unguarded bool) (stmt string, args func(resource string, token int64) []any) {
	switch d.kind {
	case kindMySQL:
		cond := "fence <= ?"
		if unguarded {
			cond = "? = ?"
		}
		return "INSERT INTO " + table + " (resource, fence) VALUES (?, ?) ON DUPLICATE KEY UPDATE fence = IF(" + cond + ", ?, fence)",
			func(r string, t int64) []any {
				if unguarded {
					return []any{r, t, t, t, t}
				}
				return []any{r, t, t, t}
			}
	default:
		cond := "f.fence <= excluded.fence"
		if unguarded {
			cond = "1 = 1"
		}
		return d.Rebind("INSERT INTO " + table + " AS f (resource, fence) VALUES (?, ?) ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence WHERE " +
				cond + " RETURNING fence"),
			func(r string, t int64) []any { return []any{r, t} }
	}
}

// readFence reads a resource's stored fence; on PostgreSQL and MySQL with a
// locking read (FOR UPDATE), which sees the latest committed version.
func (d Dialect) readFence(table string) string {
	q := "SELECT fence FROM " + table + " WHERE resource = ?"
	if d.kind != kindSQLite {
		q += " FOR UPDATE"
	}
	return d.Rebind(q)
}
