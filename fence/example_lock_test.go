package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // any database/sql driver; this one is pure Go

	"github.com/lockraft/lockraft"
	"github.com/lockraft/lockraft/fence"
)

// Fencing at the resource: every write carries the lock's token, and the
// database refuses a token lower than one it has accepted. A holder that
// lost its lock without noticing (a long GC pause, a partition) then cannot
// overwrite the next holder's work. Here the resource is a SQLite file and
// the fence is checked by package fence, in the same transaction as the
// write.
func Example_fencing() {
	dir, err := os.MkdirTemp("", "lockraft-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	addr := ln.Addr().String()
	node, err := lockraft.Join([]string{addr}, lockraft.WithDataDir(filepath.Join(dir, "lockraft")),
		lockraft.WithListener(ln), lockraft.WithListenAddr(addr), lockraft.WithTimings(10*time.Millisecond, 10))
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The resource: a stock table, and the fence table (resource, fence).
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	guard, err := fence.NewGuard(db, fence.SQLite)
	if err != nil {
		log.Fatal(err)
	}
	if err := guard.CreateTable(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE stock (sku TEXT PRIMARY KEY, qty INTEGER NOT NULL);
		INSERT INTO stock VALUES ('sku-42', 10)`); err != nil {
		log.Fatal(err)
	}
	// sell writes under a token: the transaction's first statement raises
	// the fence of the lock's name to the token, or fails as stale.
	sell := func(l *lockraft.Lock) error {
		return guard.Tx(ctx, l.Name(), l.Token(), func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE stock SET qty = qty - 1 WHERE sku = 'sku-42'`)
			return err
		})
	}

	first, err := node.Lock(ctx, "stock/sku-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first holder sells:", sell(first) == nil)
	first.Unlock(ctx) // or: its lease ran out while it was paused

	second, err := node.Lock(ctx, "stock/sku-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("second holder sells:", sell(second) == nil)

	// The first holder wakes up and writes again with its old token.
	err = sell(first)
	fmt.Println("late write refused:", errors.Is(err, fence.ErrStaleToken))
	second.Unlock(ctx)

	var qty int
	if err := db.QueryRowContext(ctx, `SELECT qty FROM stock WHERE sku = 'sku-42'`).Scan(&qty); err != nil {
		log.Fatal(err)
	}
	fmt.Println("stock:", qty)
	// Output:
	// first holder sells: true
	// second holder sells: true
	// late write refused: true
	// stock: 8
}
