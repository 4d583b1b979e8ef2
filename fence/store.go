package fence

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// A Store admits requests to a fenced server (UnaryServerInterceptor,
// StreamServerInterceptor, Middleware) one resource at a time.
//
// Admit waits until no other request for resource is admitted (or ctx
// ends), then refuses token with a *StaleError if it is lower than the
// highest token admitted for resource, or records it. On success the
// handler runs with the returned context and the caller must call finish
// exactly once with the handler's error when it is done; the next request
// for resource is admitted only then. finish's error is the outcome of
// making the handler's work durable (SQLStore's commit); nil for
// MemoryStore.
type Store interface {
	Admit(ctx context.Context, resource string, token uint64) (hctx context.Context, finish func(handlerErr error) error, err error)
}

// MemoryStore keeps each resource's highest token in memory: for a single
// server process whose own state is in memory too. It remembers every
// resource it has seen (a fence must never be forgotten). Safe for
// concurrent use; the zero value is ready.
type MemoryStore struct {
	mu  sync.Mutex
	res map[string]*memResource
}

type memResource struct {
	highest uint64        // guarded by MemoryStore.mu
	turn    chan struct{} // holds one value while a request is admitted
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{} }

func (s *MemoryStore) resource(name string) *memResource {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.res == nil {
		s.res = map[string]*memResource{}
	}
	r := s.res[name]
	if r == nil {
		r = &memResource{turn: make(chan struct{}, 1)}
		s.res[name] = r
	}
	return r
}

// Admit implements Store.
func (s *MemoryStore) Admit(ctx context.Context, resource string, token uint64) (context.Context, func(error) error, error) {
	if _, err := checkToken(resource, token); err != nil {
		return nil, nil, err
	}
	r := s.resource(resource)
	select {
	case r.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, context.Cause(ctx)
	}
	s.mu.Lock()
	h := r.highest
	if token >= h {
		r.highest = token
	}
	s.mu.Unlock()
	if token < h {
		<-r.turn
		return nil, nil, &StaleError{Resource: resource, Token: token, Highest: h}
	}
	var once sync.Once
	return ctx, func(error) error { once.Do(func() { <-r.turn }); return nil }, nil
}

// Highest returns the highest token admitted for resource (0: none).
func (s *MemoryStore) Highest(resource string) uint64 {
	r := s.resource(resource)
	s.mu.Lock()
	defer s.mu.Unlock()
	return r.highest
}

// SQLStore admits requests through a Guard's fence table: each admitted
// request is a transaction that starts with Guard.Check (so it holds the
// resource's fence row lock, which is what admits one request at a time,
// across every server sharing the database) and ends in finish: commit if
// the handler returned nil, rollback otherwise. The handler can write
// through that transaction (TxFromContext) so that its write and the new
// fence commit together. Each admitted request holds one connection of the
// Guard's *sql.DB until finish: size the pool (SetMaxOpenConns) for the
// requests you admit at once, or they queue for a connection.
type SQLStore struct{ g *Guard }

// NewSQLStore returns a Store over g's fence table (create it first with
// g.CreateTable).
func NewSQLStore(g *Guard) *SQLStore { return &SQLStore{g: g} }

type txKey struct{}

// TxFromContext returns the admitting transaction of a request admitted by
// a SQLStore; write through it so the write commits with the fence. Do not
// Commit or Rollback it: finish does.
func TxFromContext(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*sql.Tx)
	return tx, ok
}

// Admit implements Store. A transaction aborted with nothing written while
// checking the fence is retried (the Guard's retries).
func (s *SQLStore) Admit(ctx context.Context, resource string, token uint64) (context.Context, func(error) error, error) {
	if _, err := checkToken(resource, token); err != nil {
		return nil, nil, err
	}
	for attempt := 0; ; attempt++ {
		tx, err := s.g.db.BeginTx(ctx, nil)
		if err != nil {
			return nil, nil, err
		}
		err = s.g.Check(ctx, tx, resource, token)
		if err == nil {
			var once sync.Once
			var ferr error
			finish := func(herr error) error {
				once.Do(func() {
					if herr != nil {
						ferr = tx.Rollback()
						if errors.Is(ferr, sql.ErrTxDone) {
							ferr = nil
						}
						return
					}
					ferr = tx.Commit()
				})
				return ferr
			}
			return context.WithValue(ctx, txKey{}, tx), finish, nil
		}
		tx.Rollback()
		if errors.Is(err, ErrStaleToken) || !retryable(err) || attempt >= s.g.retries || ctx.Err() != nil {
			return nil, nil, err
		}
	}
}

type tokenKey struct{}

type heldToken struct {
	resource string
	token    uint64
}

// WithToken returns a context that carries the lock's resource and token
// to UnaryClientInterceptor, StreamClientInterceptor and Transport. Use the
// lock's name as resource.
func WithToken(ctx context.Context, resource string, token uint64) context.Context {
	return context.WithValue(ctx, tokenKey{}, heldToken{resource, token})
}

// TokenFromContext returns what WithToken put into ctx.
func TokenFromContext(ctx context.Context) (resource string, token uint64, ok bool) {
	h, ok := ctx.Value(tokenKey{}).(heldToken)
	return h.resource, h.token, ok
}
