package fence

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrStaleToken: the token is lower than the highest the resource has
	// accepted, so the lock it came from has been granted again since. The
	// write was not applied; retrying it with the same token is pointless
	// (take the lock again, re-read, then write).
	ErrStaleToken = errors.New("fence: stale fencing token")
	// ErrNoRow: Guard.Update's WHERE matched no row. Nothing changed.
	ErrNoRow = errors.New("fence: no such row")
	// ErrMissingToken: a fenced server got a request without a token (or
	// with one it cannot parse). Nothing ran.
	ErrMissingToken = errors.New("fence: missing or malformed fencing token")
	// ErrInvalid: bad arguments (a zero token, an identifier that is not a
	// plain SQL name, an unknown dialect). Nothing ran.
	ErrInvalid = errors.New("fence: invalid argument")
)

// StaleError is the error a stale token gets; errors.Is(err,
// ErrStaleToken) is true for it.
type StaleError struct {
	Resource string
	Token    uint64 // the refused token
	Highest  uint64 // the fence stored when it was refused (0: not known)
}

func (e *StaleError) Error() string {
	if e.Highest == 0 {
		return fmt.Sprintf("fence: stale fencing token %d for %q", e.Token, e.Resource)
	}
	return fmt.Sprintf("fence: stale fencing token %d for %q (fence is %d)", e.Token, e.Resource, e.Highest)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleError) Is(target error) bool { return target == ErrStaleToken }

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
}

// IsRetryable reports whether err is a database's abort of a transaction
// or statement that wrote nothing and may be retried as a whole: a
// deadlock or serialization failure (MySQL 1213/1205, SQLSTATE 40001/40P01)
// or SQLite's busy/locked. Guard.Tx and SQLStore already retry these;
// Guard.Update returns them to the caller.
func IsRetryable(err error) bool { return retryable(err) }

// retryable reports whether err is a transaction abort that wrote nothing
// and may be retried as a whole: a deadlock or serialization failure, or
// SQLite's busy/locked. It looks at the driver's error without importing
// the driver: pgx and lib/pq expose SQLState(), modernc.org/sqlite Code(),
// and go-sql-driver/mysql formats "Error 1213 (40001): ...".
func retryable(err error) bool {
	if err == nil {
		return false
	}
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		switch st.SQLState() {
		case "40001", "40P01":
			return true
		}
	}
	var code interface{ Code() int }
	if errors.As(err, &code) {
		switch code.Code() & 0xff {
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
			return true
		}
	}
	msg := err.Error()
	return strings.Contains(msg, "Error 1213") || strings.Contains(msg, "Error 1205") || // deadlock, lock wait timeout
		strings.Contains(msg, "(40001)") || strings.Contains(msg, "SQLITE_BUSY")
}
