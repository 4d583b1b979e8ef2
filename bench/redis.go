package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockraft/lockraft/internal/sqlserver"
)

// Redis as people use it for locks: SET name token NX PX ttl, released by a
// Lua compare-and-delete; a blocked Lock polls. The program starts its own
// redis-server processes on free loopback ports, in temp directories.
func init() {
	register(systemFactory{
		name:          "redis",
		available:     redisAvailable,
		start:         func(dir string, ttl time.Duration) (system, error) { return startRedisSystem(dir, ttl, false) },
		crashTakeover: func(dir string, ttl time.Duration) (time.Duration, error) { return redisCrashTakeover(dir, ttl, false) },
	})
	register(systemFactory{
		name:          "redis-aof-always",
		available:     redisAvailable,
		start:         func(dir string, ttl time.Duration) (system, error) { return startRedisSystem(dir, ttl, true) },
		crashTakeover: func(dir string, ttl time.Duration) (time.Duration, error) { return redisCrashTakeover(dir, ttl, true) },
	})
}

// Blocked Lock retry delay: uniformly random in [redisRetryMin, redisRetryMax).
const (
	redisRetryMin = 1 * time.Millisecond
	redisRetryMax = 5 * time.Millisecond
)

func redisAvailable() error {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return errors.New("redis-server not found; install it with: apt-get install -y redis-server")
	}
	return nil
}

// redisServer is one redis-server process; End kills it (SIGKILL).
type redisServer struct {
	*sqlserver.Process
	addr string
}

// startRedisServer starts redis-server in dir with default persistence, or
// with appendonly yes + appendfsync always.
func startRedisServer(dir string, aofAlways bool) (*redisServer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := sqlserver.FreePort()
	if err != nil {
		return nil, err
	}
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--daemonize", "no", "--logfile", "", "--loglevel", "warning"}
	if aofAlways {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	}
	cmd := exec.Command("redis-server", args...)
	cmd.Stdout, cmd.Stderr = nil, nil
	p, err := sqlserver.StartProcess(cmd, 0)
	if err != nil {
		return nil, err
	}
	s := &redisServer{Process: p, addr: fmt.Sprintf("127.0.0.1:%d", port)}
	c := redis.NewClient(&redis.Options{Addr: s.addr})
	defer c.Close()
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if c.Ping(context.Background()).Err() == nil {
			return s, nil
		}
		select {
		case <-s.Done():
			return nil, fmt.Errorf("redis-server on %s exited", s.addr)
		default:
		}
		if time.Since(start) > 10*time.Second {
			s.End()
			return nil, fmt.Errorf("redis-server on %s did not answer", s.addr)
		}
	}
}

func newRedisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: 128, MinIdleConns: 8})
}

var unlockScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

func randomToken() string {
	var b [16]byte
	crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// redisSystem: one server, one shared client pool (as a service would).
type redisSystem struct {
	srv *redisServer
	cl  *redis.Client
	ttl time.Duration
}

func startRedisSystem(dir string, ttl time.Duration, aof bool) (*redisSystem, error) {
	s, err := startRedisServer(dir, aof)
	if err != nil {
		return nil, err
	}
	return &redisSystem{srv: s, cl: newRedisClient(s.addr), ttl: ttl}, nil
}

func (r *redisSystem) stop() {
	r.cl.Close()
	r.srv.End()
}

func (r *redisSystem) serverPIDs() []int { return []int{r.srv.Pid()} }

func (r *redisSystem) caller(int) (caller, error) { return &redisCaller{cl: r.cl, ttl: r.ttl}, nil }

type redisCaller struct {
	cl  *redis.Client
	ttl time.Duration
}

func (c *redisCaller) close() {}

// lock polls SET NX PX until it succeeds or ctx ends.
func (c *redisCaller) lock(ctx context.Context, name string) (func(context.Context) error, error) {
	tok := randomToken()
	for {
		ok, err := c.cl.SetNX(ctx, name, tok, c.ttl).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			return func(ctx context.Context) error {
				n, err := unlockScript.Run(ctx, c.cl, []string{name}, tok).Int()
				if err == nil && n != 1 {
					err = errors.New("lock was not held")
				}
				return err
			}, nil
		}
		d := redisRetryMin + rand.N(redisRetryMax-redisRetryMin)
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(d):
		}
	}
}

// redisCrashTakeover: the holder takes the lock and dies (never releases);
// a waiter polling on its own connection gets it when PX runs out.
func redisCrashTakeover(dir string, ttl time.Duration, aof bool) (time.Duration, error) {
	r, err := startRedisSystem(dir, ttl, aof)
	if err != nil {
		return 0, err
	}
	defer r.stop()
	holderCl := newRedisClient(r.srv.addr)
	holder := &redisCaller{cl: holderCl, ttl: ttl}
	ctx, cancel := context.WithTimeout(context.Background(), ttl+30*time.Second)
	defer cancel()
	if _, err := holder.lock(ctx, "s4/crash"); err != nil {
		return 0, err
	}
	t0 := time.Now()
	holderCl.Close() // the holder is gone; nobody releases
	waiter := &redisCaller{cl: r.cl, ttl: ttl}
	got := waitGrant(ctx, waiter, "s4/crash")
	return (<-got).since(t0)
}
