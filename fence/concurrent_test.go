package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The concurrent stale-writer tests (promise S2, fencing: a resource that
// checks tokens refuses every write from a lock that has been granted
// again since). Tokens come from one counter, as grants of one lock name
// do. Fresh writers take the next token and write at once, racing each
// other; stale writers take a token and then wait until a higher one has
// been accepted before they write, as a holder paused past its lease does.
// Half the writers use one *sql.DB pool, half another, so the writes come
// over many connections.
//
// The verdict, from what the writers saw and what the database holds:
// no stale writer's write accepted, no accepted write missing or applied
// twice, tokens non-decreasing in commit order, and no write refused as
// stale unless a higher token had been accepted. Each test also runs the
// same workload against a guard whose condition was removed (planted) and
// requires the verdict to find violations there.

type load struct {
	fresh, stale       int // writer goroutines
	freshOps, staleOps int // writes per goroutine (fresh writers go on until the stale ones are done)
}

var defaultLoad = load{fresh: 6, stale: 3, freshOps: 40, staleOps: 8}

type outcome struct {
	token uint64
	stale bool // a planned stale writer
	err   error
}

// watermark is the highest accepted token, with a way to wait for it to
// pass a value.
type watermark struct {
	mu sync.Mutex
	v  uint64
	ch chan struct{} // closed and replaced at every raise
}

func newWatermark() *watermark { return &watermark{ch: make(chan struct{})} }

func (w *watermark) raise(v uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if v > w.v {
		w.v = v
		close(w.ch)
		w.ch = make(chan struct{})
	}
}

func (w *watermark) waitAbove(ctx context.Context, v uint64) error {
	for {
		w.mu.Lock()
		cur, ch := w.v, w.ch
		w.mu.Unlock()
		if cur > v {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// runWriters runs the fresh and stale writers; write(pool, token) makes one
// fenced write.
func runWriters(t *testing.T, l load, write func(ctx context.Context, pool int, token uint64) error) []outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var next atomic.Uint64
	wm := newWatermark()
	var mu sync.Mutex
	var outs []outcome
	record := func(o outcome) { mu.Lock(); outs = append(outs, o); mu.Unlock() }
	var staleLeft atomic.Int32
	staleLeft.Store(int32(l.stale))
	var wg sync.WaitGroup
	for g := range l.fresh {
		wg.Go(func() {
			for i := 0; (i < l.freshOps || staleLeft.Load() > 0) && ctx.Err() == nil; i++ {
				tok := next.Add(1)
				err := write(ctx, g%2, tok)
				if err == nil {
					wm.raise(tok)
				}
				record(outcome{token: tok, err: err})
				if err != nil && !errors.Is(err, ErrStaleToken) {
					cancel() // broken, not stale: stop here and let the verdict say so
					return
				}
			}
		})
	}
	for g := range l.stale {
		wg.Go(func() {
			defer staleLeft.Add(-1)
			for range l.staleOps {
				tok := next.Add(1)
				if err := wm.waitAbove(ctx, tok); err != nil {
					record(outcome{token: tok, stale: true, err: fmt.Errorf("never overtaken: %w", err)})
					return
				}
				record(outcome{token: tok, stale: true, err: write(ctx, (g+1)%2, tok)})
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		for _, o := range outs {
			if o.err != nil && !errors.Is(o.err, ErrStaleToken) {
				t.Errorf("token %d: %v", o.token, o.err)
				break
			}
		}
		t.Fatalf("workload did not finish: %v", ctx.Err())
	}
	return outs
}

// verdict checks the writers' outcomes against the tokens the database
// applied, in commit order (applied; nil when the pattern keeps no order)
// and the count it holds (count). It returns the violations.
func verdict(outs []outcome, applied []uint64, count int64) (bad []string, summary string) {
	var accepted []uint64
	var maxAccepted uint64
	staleTried, staleRefused, freshRefused, freshOK := 0, 0, 0, 0
	for _, o := range outs {
		switch {
		case o.err == nil:
			accepted = append(accepted, o.token)
			maxAccepted = max(maxAccepted, o.token)
			if o.stale {
				bad = append(bad, fmt.Sprintf("stale write accepted: token %d, written after a higher token was accepted", o.token))
			} else {
				freshOK++
			}
		case errors.Is(o.err, ErrStaleToken):
			var se *StaleError
			if !errors.As(o.err, &se) || se.Token != o.token {
				bad = append(bad, fmt.Sprintf("token %d: stale error without the details: %v", o.token, o.err))
			}
			if o.stale {
				staleRefused++
			} else {
				freshRefused++
			}
		default:
			bad = append(bad, fmt.Sprintf("token %d: unexpected error %v", o.token, o.err))
		}
		if o.stale {
			staleTried++
		}
	}
	for _, o := range outs {
		if errors.Is(o.err, ErrStaleToken) && o.token >= maxAccepted {
			bad = append(bad, fmt.Sprintf("token %d refused as stale but no higher token was ever accepted (max %d)", o.token, maxAccepted))
		}
	}
	if count != int64(len(accepted)) {
		bad = append(bad, fmt.Sprintf("database counts %d writes, %d were acknowledged (lost or phantom writes)", count, len(accepted)))
	}
	if applied != nil {
		for i := 1; i < len(applied); i++ {
			if applied[i] < applied[i-1] {
				bad = append(bad, fmt.Sprintf("commit order: token %d applied after token %d", applied[i], applied[i-1]))
			}
		}
		a, b := slices.Clone(applied), slices.Clone(accepted)
		slices.Sort(a)
		slices.Sort(b)
		if !slices.Equal(a, b) {
			bad = append(bad, fmt.Sprintf("applied tokens differ from acknowledged ones (%d applied, %d acknowledged)", len(a), len(b)))
		}
	}
	if staleTried == 0 {
		bad = append(bad, "no stale writer ran: the test tested nothing")
	}
	summary = fmt.Sprintf("%d writes: %d fresh accepted, %d fresh refused as stale (overtaken by a racing writer), %d planned stale refused of %d",
		len(outs), freshOK, freshRefused, staleRefused, staleTried)
	return bad, summary
}

// txWorkload: the fence-table pattern (Guard.Tx). Each write reads a
// counter, writes counter+1 and appends (counter+1, token) to an audit
// table, all in the fenced transaction.
func txWorkload(t *testing.T, d testDB, unguarded bool) (bad []string, summary string) {
	open := d.fresh(t)
	pools := []*sql.DB{open(), open()}
	checkDefaultIsolation(t, d, pools[0])
	ctx := context.Background()
	var guards []*Guard
	for _, p := range pools {
		g, err := NewGuard(p, d.dialect, WithRetries(50))
		if err != nil {
			t.Fatal(err)
		}
		g.unguarded = unguarded
		guards = append(guards, g)
	}
	mustExec(t, pools[0], guards[0].CreateTable(ctx))
	setupLedger(t, pools[0])
	rb := d.dialect.Rebind
	outs := runWriters(t, defaultLoad, func(ctx context.Context, pool int, tok uint64) error {
		return guards[pool].Tx(ctx, "acct/1", tok, func(tx *sql.Tx) error { return ledgerAppend(ctx, tx, rb, tok) })
	})
	applied, seq, bad := readLedger(t, pools[0])
	if bad != nil {
		return bad, ""
	}
	return verdict(outs, applied, seq)
}

// updateWorkload: the single-statement pattern (Guard.Update) on a row with
// its own fence column; each write decrements qty and counts itself.
func updateWorkload(t *testing.T, d testDB, unguarded bool) (bad []string, summary string) {
	open := d.fresh(t)
	pools := []*sql.DB{open(), open()}
	checkDefaultIsolation(t, d, pools[0])
	var guards []*Guard
	for _, p := range pools {
		g, err := NewGuard(p, d.dialect)
		if err != nil {
			t.Fatal(err)
		}
		g.unguarded = unguarded
		guards = append(guards, g)
	}
	for _, q := range []string{
		"CREATE TABLE stock (sku VARCHAR(64) PRIMARY KEY, qty BIGINT NOT NULL, writes BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)",
		"INSERT INTO stock (sku, qty, writes) VALUES ('a', 1000000, 0)",
	} {
		_, err := pools[0].Exec(q)
		mustExec(t, pools[0], err)
	}
	var retries atomic.Int64
	outs := runWriters(t, defaultLoad, func(ctx context.Context, pool int, tok uint64) error {
		for {
			_, err := guards[pool].Update(ctx, pools[pool], Update{Table: "stock", FenceColumn: "fence",
				Set: "qty = qty - 1, writes = writes + 1", Where: "sku = ?", Args: []any{"a"}}, tok)
			if IsRetryable(err) { // a single statement aborted with nothing written (SQLite busy, deadlock)
				retries.Add(1)
				continue
			}
			return err
		}
	})
	var qty, writes, fence int64
	if err := pools[0].QueryRow("SELECT qty, writes, fence FROM stock WHERE sku = 'a'").Scan(&qty, &writes, &fence); err != nil {
		t.Fatal(err)
	}
	bad, summary = verdict(outs, nil, writes)
	if qty != 1000000-writes {
		bad = append(bad, fmt.Sprintf("qty %d after %d writes: lost update", qty, writes))
	}
	var maxAccepted uint64
	for _, o := range outs {
		if o.err == nil {
			maxAccepted = max(maxAccepted, o.token)
		}
	}
	if uint64(fence) != maxAccepted {
		bad = append(bad, fmt.Sprintf("stored fence %d, highest accepted token %d", fence, maxAccepted))
	}
	return bad, fmt.Sprintf("%s; %d statements retried", summary, retries.Load())
}

// The ledger: a counter and an audit table of (counter, token), written in
// one fenced transaction per write.
func setupLedger(t *testing.T, db *sql.DB) {
	t.Helper()
	for _, q := range []string{
		"CREATE TABLE acct (id INTEGER PRIMARY KEY, seq BIGINT NOT NULL)",
		"CREATE TABLE audit (seq BIGINT PRIMARY KEY, token BIGINT NOT NULL)",
		"INSERT INTO acct (id, seq) VALUES (1, 0)",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
}

// ledgerAppend reads the counter, writes counter+1 and appends (counter+1,
// token) to the audit table.
func ledgerAppend(ctx context.Context, tx *sql.Tx, rb func(string) string, tok uint64) error {
	var seq int64
	if err := tx.QueryRowContext(ctx, "SELECT seq FROM acct WHERE id = 1").Scan(&seq); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, rb("UPDATE acct SET seq = ? WHERE id = 1"), seq+1); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, rb("INSERT INTO audit (seq, token) VALUES (?, ?)"), seq+1, int64(tok))
	return err
}

// readLedger returns the audit's tokens in commit order and the counter;
// bad is set if they disagree (a lost update).
func readLedger(t *testing.T, db *sql.DB) (applied []uint64, seq int64, bad []string) {
	t.Helper()
	rows, err := db.Query("SELECT token FROM audit ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var tok int64
		if err := rows.Scan(&tok); err != nil {
			t.Fatal(err)
		}
		applied = append(applied, uint64(tok))
	}
	rows.Close()
	if err := db.QueryRow("SELECT seq FROM acct WHERE id = 1").Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if seq != int64(len(applied)) {
		bad = []string{fmt.Sprintf("counter %d but %d audit rows: lost update", seq, len(applied))}
	}
	return applied, seq, bad
}

func mustExec(t *testing.T, _ *sql.DB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestS2ConcurrentStaleWritersTx(t *testing.T)     { onEveryDB(t, txWorkload) }
func TestS2ConcurrentStaleWritersUpdate(t *testing.T) { onEveryDB(t, updateWorkload) }

// onEveryDB runs the guarded workload on every database, each a subtest
// that logs its summary and fails with every violation it found.
func onEveryDB(t *testing.T, workload func(*testing.T, testDB, bool) ([]string, string)) {
	for _, d := range allDBs() {
		t.Run(d.name, func(t *testing.T) {
			bad, summary := workload(t, d, false)
			t.Log(summary)
			for _, b := range bad {
				t.Error(b)
			}
		})
	}
}

// TestS2PlantedUnguardedIsCaught runs both workloads with the guard's
// condition removed (fence <= token replaced by a condition that is always
// true): the verdict must find stale writes accepted, or the tests above
// could not fail.
func TestS2PlantedUnguardedIsCaught(t *testing.T) {
	for _, d := range allDBs() {
		for _, w := range []struct {
			name string
			run  func(*testing.T, testDB, bool) ([]string, string)
		}{{"tx", txWorkload}, {"update", updateWorkload}} {
			t.Run(d.name+"/"+w.name, func(t *testing.T) {
				bad, _ := w.run(t, d, true)
				if len(bad) == 0 {
					t.Fatal("the unguarded variant passed the verdict: the checker cannot catch a missing fence")
				}
				t.Logf("caught %d violations, first: %s", len(bad), bad[0])
			})
		}
	}
}
