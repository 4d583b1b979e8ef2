package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// Redlock via redsync over 3 redis-servers (default persistence), with
// redsync's default retry delay (random 50–250 ms) but enough tries that a
// blocked Lock waits until its context ends instead of giving up after 32.
func init() {
	register(systemFactory{
		name:          "redlock",
		available:     redisAvailable,
		start:         func(dir string, ttl time.Duration) (system, error) { return startRedlock(dir, ttl) },
		crashTakeover: redlockCrashTakeover,
	})
}

type redlockSystem struct {
	srvs []*redisServer
	cls  []*redis.Client
	rs   *redsync.Redsync
	ttl  time.Duration
}

func startRedlock(dir string, ttl time.Duration) (*redlockSystem, error) {
	r := &redlockSystem{ttl: ttl}
	var pools []rsredis.Pool
	for i := range 3 {
		s, err := startRedisServer(filepath.Join(dir, fmt.Sprint(i)), false)
		if err != nil {
			r.stop()
			return nil, err
		}
		r.srvs = append(r.srvs, s)
		cl := newRedisClient(s.addr)
		r.cls = append(r.cls, cl)
		pools = append(pools, goredis.NewPool(cl))
	}
	r.rs = redsync.New(pools...)
	return r, nil
}

func (r *redlockSystem) stop() {
	for _, c := range r.cls {
		c.Close()
	}
	for _, s := range r.srvs {
		s.End()
	}
}

func (r *redlockSystem) caller(int) (caller, error) { return &redlockCaller{rs: r.rs, ttl: r.ttl}, nil }

type redlockCaller struct {
	rs  *redsync.Redsync
	ttl time.Duration
}

func (c *redlockCaller) close() {}

func (c *redlockCaller) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	m := c.rs.NewMutex(name, redsync.WithExpiry(c.ttl), redsync.WithTries(1<<30))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = fmt.Errorf("redlock unlock of %s failed", name)
		}
		return err
	}, nil
}

// redlockCrashTakeover: the holder takes the lock and never releases it; a
// waiter gets it once the expiry has run out on a quorum.
func redlockCrashTakeover(dir string, ttl time.Duration) (time.Duration, error) {
	r, ctx, end, err := freshFor(dir, ttl, startRedlock)
	if err != nil {
		return 0, err
	}
	defer end()
	c := &redlockCaller{rs: r.rs, ttl: ttl}
	if _, err := c.lock(ctx, "s4/crash"); err != nil {
		return 0, err
	}
	t0 := time.Now() // the holder is gone; nobody releases
	got := waitGrant(ctx, c, "s4/crash")
	return (<-got).since(t0)
}
