// Package fence checks fencing tokens where the protected resource lives: in
// a SQL database, behind a gRPC service, behind an HTTP service.
//
// A distributed lock can be lost while its holder still runs (a GC pause, a
// partition): the holder's next write would then land after the next
// holder's. Every lockraft grant carries a token (Lock.Token) that is higher
// than every earlier grant's of that name (re-entering returns the same
// token); a resource that refuses tokens lower than the highest it has
// accepted makes such a late write harmless. This package is that refusal,
// written once for the places resources usually live. It does not import
// lockraft: a token is a uint64 and a resource is a string (use the lock's
// name: tokens of different names are not comparable).
//
// # SQL
//
// A Guard works over database/sql with one of three dialects (PostgreSQL,
// MySQL/MariaDB, SQLite); the driver is the caller's. Two patterns:
//
//   - Guard.Update: one conditional statement on a row that stores its own
//     fence column: UPDATE t SET <write>, fence = $token WHERE <row> AND
//     fence <= $token. The write and the new fence land together or not at
//     all; zero rows means stale (or a missing row) and nothing changed.
//   - Guard.Tx / Guard.Check: a fence table (resource, fence) for writes of
//     several statements or tables. The fence row is checked and raised by
//     the first statement of the transaction, which also locks it until
//     commit; the caller's statements follow in the same transaction.
//
// A token is accepted when it is not lower than the stored fence (equal is
// the same grant writing again) and refused with an error matching
// ErrStaleToken otherwise; a refused write changes nothing.
//
// Why this is correct under concurrent writers at each database's default
// isolation level (no SERIALIZABLE needed):
//
//   - PostgreSQL, READ COMMITTED. The conditional UPDATE and the fence
//     table's INSERT … ON CONFLICT DO UPDATE … WHERE take the row's lock.
//     A writer that finds the row locked waits; when the other commits,
//     PostgreSQL re-evaluates the WHERE against the newly committed version
//     of the row (EvalPlanQual), not against the statement's snapshot, so a
//     token that has meanwhile become stale matches nothing. ON CONFLICT
//     locks the conflicting row even when its WHERE is false. The lock is
//     held to commit, so the caller's later statements are serialized with
//     every other fenced transaction on that resource.
//   - MySQL/MariaDB (InnoDB), REPEATABLE READ. UPDATE and INSERT … ON
//     DUPLICATE KEY UPDATE are locking reads: they read the latest committed
//     version of the row, not the transaction's snapshot, under an exclusive
//     record lock held to commit. The fence table's verdict is read back with
//     SELECT … FOR UPDATE (also a locking read) because InnoDB's affected-row
//     count cannot tell "stale" from "same value written again".
//   - SQLite. One writer at a time per database file: a transaction's first
//     write takes the RESERVED lock (the WAL write lock) and holds it to
//     commit, and a write transaction always works on the latest committed
//     state (in WAL mode SQLite refuses, with SQLITE_BUSY_SNAPSHOT, to
//     upgrade a read transaction whose snapshot is out of date). Open the
//     database with a busy timeout, and prefer BEGIN IMMEDIATE (modernc.org/
//     sqlite: _txlock=immediate) so that a transaction that reads first does
//     not fail its upgrade.
//
// Deadlocks and serialization failures (MySQL 1213, SQLSTATE 40001/40P01,
// SQLITE_BUSY) abort a transaction with nothing written; Guard.Tx retries
// those a few times (WithRetries), so its function may run more than once.
// A Commit that fails for any other reason leaves the outcome unknown, as
// with any database.
//
// # gRPC and HTTP
//
// On the client side WithToken puts (resource, token) into a context;
// UnaryClientInterceptor, StreamClientInterceptor and Transport (an
// http.RoundTripper) send them as metadata / headers. On the server side
// UnaryServerInterceptor, StreamServerInterceptor and Middleware admit a
// request through a Store (MemoryStore, or SQLStore over a Guard's fence
// table): a stale token is refused before the handler runs, with gRPC
// status Aborted (see StaleStatus) or HTTP 409 Conflict. Requests for one
// resource are admitted one at a time, from the check until the handler
// returns, so a stale request cannot slip its write in after a newer one
// was admitted. With SQLStore the handler can write through the admitting
// transaction (TxFromContext), so its write and the fence commit together.
package fence
