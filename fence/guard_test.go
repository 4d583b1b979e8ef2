package fence

import (
	"context"
	"database/sql"
	"errors"
	"testing"
)

func TestRebindAndPlaceholders(t *testing.T) {
	q := `UPDATE t SET a = ?, b = 'what?', c = "x?y" WHERE d = ? AND e = ` + "`?`"
	if got, want := Postgres.Rebind(q), `UPDATE t SET a = $1, b = 'what?', c = "x?y" WHERE d = $2 AND e = `+"`?`"; got != want {
		t.Fatalf("Rebind = %s, want %s", got, want)
	}
	if got := MySQL.Rebind(q); got != q {
		t.Fatalf("MySQL Rebind changed the query: %s", got)
	}
	if n := placeholders(q); n != 2 {
		t.Fatalf("placeholders = %d, want 2", n)
	}
}

func TestInvalidArguments(t *testing.T) {
	db := sqliteDB().fresh(t)()
	for _, c := range []struct {
		name string
		err  error
	}{
		{"nil db", func() error { _, err := NewGuard(nil, SQLite); return err }()},
		{"zero dialect", func() error { _, err := NewGuard(db, Dialect{}); return err }()},
		{"table name with a quote", func() error { _, err := NewGuard(db, SQLite, WithTable("x'; DROP TABLE y; --")); return err }()},
		{"negative retries", func() error { _, err := NewGuard(db, SQLite, WithRetries(-1)); return err }()},
		{"unknown dialect name", func() error { _, err := ParseDialect("oracle"); return err }()},
	} {
		if !errors.Is(c.err, ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", c.name, c.err)
		}
	}
	g, err := NewGuard(db, SQLite)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := g.Tx(ctx, "r", 0, func(*sql.Tx) error { return nil }); !errors.Is(err, ErrInvalid) {
		t.Errorf("token 0: got %v, want ErrInvalid", err)
	}
	if err := g.Tx(ctx, "r", 1<<63, func(*sql.Tx) error { return nil }); !errors.Is(err, ErrInvalid) {
		t.Errorf("token 2^63: got %v, want ErrInvalid", err)
	}
	if err := g.Tx(ctx, "", 1, func(*sql.Tx) error { return nil }); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty resource: got %v, want ErrInvalid", err)
	}
	if _, err := g.Update(ctx, db, Update{Table: "t", FenceColumn: "fence", Set: "a = ?", Where: "k = ?", Args: []any{1}}, 1); !errors.Is(err, ErrInvalid) {
		t.Errorf("Update with too few args: got %v, want ErrInvalid", err)
	}
	if _, err := g.Update(ctx, db, Update{Table: "t;", FenceColumn: "fence", Set: "a = 1", Where: "k = 1"}, 1); !errors.Is(err, ErrInvalid) {
		t.Errorf("Update with a bad table name: got %v, want ErrInvalid", err)
	}
}

// TestS2GuardSemantics: on every database, a token equal to the fence is
// accepted (the same grant writing again), a lower one is refused with the
// details and changes nothing, a missing row is ErrNoRow, and a failing fn
// leaves the fence where it was.
func TestS2GuardSemantics(t *testing.T) {
	for _, d := range allDBs() {
		t.Run(d.name, func(t *testing.T) {
			db := d.fresh(t)()
			ctx := context.Background()
			g, err := NewGuard(db, d.dialect)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.CreateTable(ctx); err != nil {
				t.Fatal(err)
			}
			if err := g.CreateTable(ctx); err != nil {
				t.Fatalf("CreateTable twice: %v", err)
			}
			if _, err := db.Exec("CREATE TABLE kv (k VARCHAR(32) PRIMARY KEY, v BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)"); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec("INSERT INTO kv (k, v) VALUES ('a', 0)"); err != nil {
				t.Fatal(err)
			}
			rb := d.dialect.Rebind
			put := func(tok uint64, v int) error {
				return g.Tx(ctx, "kv/a", tok, func(tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, rb("UPDATE kv SET v = ? WHERE k = 'a'"), v)
					return err
				})
			}
			get := func() (v, f int64) {
				t.Helper()
				if err := db.QueryRow("SELECT v, fence FROM kv WHERE k = 'a'").Scan(&v, &f); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err := put(10, 1); err != nil {
				t.Fatalf("first write: %v", err)
			}
			if err := put(10, 2); err != nil {
				t.Fatalf("same token again: %v", err)
			}
			err = put(9, 3)
			var se *StaleError
			if !errors.As(err, &se) || !errors.Is(err, ErrStaleToken) || se.Token != 9 || se.Highest != 10 || se.Resource != "kv/a" {
				t.Fatalf("lower token: got %#v (%v), want StaleError{kv/a, 9, 10}", se, err)
			}
			if v, _ := get(); v != 2 {
				t.Fatalf("stale Tx changed v to %d", v)
			}
			boom := errors.New("boom")
			if err := g.Tx(ctx, "kv/a", 20, func(*sql.Tx) error { return boom }); !errors.Is(err, boom) {
				t.Fatalf("fn error: got %v", err)
			}
			if err := put(11, 4); err != nil {
				t.Fatalf("token 11 after a rolled-back token 20: %v (the failed Tx must not raise the fence)", err)
			}

			upd := func(tok uint64, v int, key string) (int64, error) {
				return g.Update(ctx, db, Update{Table: "kv", FenceColumn: "fence", Set: "v = ?", Where: "k = ?", Args: []any{v, key}}, tok)
			}
			if n, err := upd(5, 5, "a"); err != nil || n != 1 {
				t.Fatalf("Update token 5: %d, %v", n, err)
			}
			if n, err := upd(5, 6, "a"); err != nil || n != 1 {
				t.Fatalf("Update same token again: %d, %v", n, err)
			}
			n, err := upd(4, 7, "a")
			if !errors.As(err, &se) || se.Token != 4 || se.Highest != 5 || n != 0 {
				t.Fatalf("Update lower token: %d, %v; want StaleError{4, 5}", n, err)
			}
			if v, f := get(); v != 6 || f != 5 {
				t.Fatalf("after a stale Update: v %d fence %d, want 6 and 5", v, f)
			}
			if _, err := upd(6, 1, "nope"); !errors.Is(err, ErrNoRow) {
				t.Fatalf("Update of a missing row: %v, want ErrNoRow", err)
			}
			// Same token, same values: MySQL reports 0 rows changed; the
			// guard must not call that stale.
			if _, err := upd(5, 6, "a"); err != nil {
				t.Fatalf("Update with the same token and values: %v", err)
			}
		})
	}
}
