package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // any database/sql driver; this one is pure Go

	"github.com/lockraft/lockraft/fence"
)

// One conditional statement on a row that keeps its own fence column: the
// write and the new fence land together, or nothing changes. The tokens
// here stand for two grants of one lock (Lock.Token), the older one 7.
func ExampleGuard_Update() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fence-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE stock (sku TEXT PRIMARY KEY, qty INTEGER NOT NULL,
		fence BIGINT NOT NULL DEFAULT 0); INSERT INTO stock (sku, qty) VALUES ('sku-42', 10)`); err != nil {
		log.Fatal(err)
	}
	guard, err := fence.NewGuard(db, fence.SQLite)
	if err != nil {
		log.Fatal(err)
	}

	sell := func(token uint64) error {
		// UPDATE stock SET qty = qty - 1, fence = <token> WHERE (sku = ?) AND fence <= <token>
		_, err := guard.Update(ctx, db, fence.Update{Table: "stock", FenceColumn: "fence",
			Set: "qty = qty - ?", Where: "sku = ?", Args: []any{1, "sku-42"}}, token)
		return err
	}
	fmt.Println("token 9 writes:", sell(9) == nil)
	fmt.Println("token 9 again:", sell(9) == nil) // the same grant writing again
	err = sell(7)
	fmt.Println("token 7 is stale:", errors.Is(err, fence.ErrStaleToken))
	// Output:
	// token 9 writes: true
	// token 9 again: true
	// token 7 is stale: true
}

// Over HTTP the client sends the token with each request (Transport) and
// the server refuses a stale one with 409 Conflict before its handler runs
// (Middleware).
func ExampleMiddleware() {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "written")
	})
	srv := httptest.NewServer(fence.Middleware(fence.NewMemoryStore(), handler))
	defer srv.Close()
	client := &http.Client{Transport: &fence.Transport{}}

	post := func(token uint64) error {
		ctx := fence.WithToken(context.Background(), "stock/sku-42", token)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		return fence.CheckResponse(resp) // a *StaleError for a 409 from the fence
	}
	fmt.Println("token 9 admitted:", post(9) == nil)
	err := post(7)
	fmt.Println("token 7 refused as stale:", errors.Is(err, fence.ErrStaleToken))
	// Output:
	// token 9 admitted: true
	// token 7 refused as stale: true
}
