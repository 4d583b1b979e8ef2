package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"time"
)

// ErrStale is the store's answer to a request whose fencing token is lower
// than the highest it has already seen for that SKU.
var ErrStale = errors.New("stale fencing token rejected")

// Resource is what the workers protect with the lock: the stock of each SKU.
// Every call carries the lock's fencing token. The in-memory Store is used
// directly in single-process mode; an HTTP client to the same Store is used
// by the child processes in -procs mode.
type Resource interface {
	// Enter starts a critical section and reads the stock (a fenced read).
	Enter(sku string, token, node, leader uint64) (stock int, err error)
	// Write sets the stock (a fenced write).
	Write(sku string, token uint64, stock int) error
	// Exit ends the critical section Enter started.
	Exit(sku string, token uint64) error
	// Highest is the highest token the store has seen for sku.
	Highest(sku string) (uint64, error)
}

// skuState is the store's book for one SKU.
type skuState struct {
	Initial int `json:"initial"`
	Stock   int `json:"stock"`
	Sold    int `json:"sold"` // accepted writes

	highest     uint64            // highest token seen (enter or write)
	lastWritten uint64            // token of the last accepted write (audit)
	open        map[uint64]uint64 // open critical sections: token -> node

	Ops           int    `json:"ops"`
	Overlaps      int    `json:"overlaps"`       // Enter while another section was open
	MaxInside     int    `json:"max_inside"`     // most sections open at once
	Rejected      int    `json:"stale_rejected"` // requests refused for a stale token
	StaleAccepted int    `json:"stale_accepted"` // audit: accepted write older than an earlier accepted one
	BadWrites     int    `json:"bad_writes"`     // audit: a write that was not "stock read under this token, minus one"
	Handoffs      int    `json:"handoffs"`       // holder moved to another node
	Holder        uint64 `json:"holder"`         // node inside now (0: none)
	LastNode      uint64 `json:"last_node"`      // node that entered last
	reads         map[uint64]int
}

// Store is the shared in-memory "database": it checks fencing tokens and
// counts overlapping critical sections.
type Store struct {
	mu     sync.Mutex
	skus   map[string]*skuState
	leader uint64
	start  time.Time
	// abandoned: SKUs whose section was open in a killed process, and when.
	abandoned map[string]time.Time
	recovered []string
}

// NewStore stocks each SKU with initial units.
func NewStore(skus []string, initial int) *Store {
	s := &Store{skus: map[string]*skuState{}, start: time.Now(), abandoned: map[string]time.Time{}}
	for _, k := range skus {
		s.skus[k] = &skuState{Initial: initial, Stock: initial, open: map[uint64]uint64{}, reads: map[uint64]int{}}
	}
	return s
}

func (s *Store) sku(k string) (*skuState, error) {
	st, ok := s.skus[k]
	if !ok {
		return nil, fmt.Errorf("unknown sku %q", k)
	}
	return st, nil
}

// fence is the rule every fenced resource applies: refuse a token lower
// than the highest seen, otherwise remember it.
func (st *skuState) fence(token uint64) error {
	if token < st.highest {
		st.Rejected++
		return ErrStale
	}
	st.highest = token
	return nil
}

func (s *Store) Enter(k string, token, node, leader uint64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.sku(k)
	if err != nil {
		return 0, err
	}
	if leader != 0 {
		s.leader = leader
	}
	if err := st.fence(token); err != nil {
		return 0, err
	}
	st.Ops++
	if len(st.open) > 0 {
		st.Overlaps++
	}
	st.open[token] = node
	st.MaxInside = max(st.MaxInside, len(st.open))
	if st.LastNode != 0 && st.LastNode != node {
		st.Handoffs++
	}
	st.LastNode, st.Holder = node, node
	st.reads[token] = st.Stock
	if at, ok := s.abandoned[k]; ok && node != 0 {
		delete(s.abandoned, k)
		s.recovered = append(s.recovered, fmt.Sprintf("%s: next holder (node %d, token %d) entered %.1fs after the kill", k, node, token, time.Since(at).Seconds()))
	}
	return st.Stock, nil
}

func (s *Store) Write(k string, token uint64, stock int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.sku(k)
	if err != nil {
		return err
	}
	if err := st.fence(token); err != nil {
		return err
	}
	// Audit, independent of the fence above.
	if token < st.lastWritten {
		st.StaleAccepted++
	}
	if read, ok := st.reads[token]; !ok || stock != read-1 || read != st.Stock {
		st.BadWrites++
	}
	st.lastWritten = token
	st.Stock = stock
	st.Sold++
	return nil
}

func (s *Store) Exit(k string, token uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.sku(k)
	if err != nil {
		return err
	}
	delete(st.open, token)
	delete(st.reads, token)
	if len(st.open) == 0 {
		st.Holder = 0
	}
	return nil
}

func (s *Store) Highest(k string) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.sku(k)
	if err != nil {
		return 0, err
	}
	return st.highest, nil
}

// Abandon closes the critical sections of a node whose process was killed
// (a dead process is inside nothing) and returns the SKUs it was inside.
func (s *Store) Abandon(node uint64) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, st := range s.skus {
		for tok, n := range st.open {
			if n == node {
				delete(st.open, tok)
				delete(st.reads, tok)
				s.abandoned[k] = time.Now()
				out = append(out, k)
			}
		}
		if len(st.open) == 0 {
			st.Holder = 0
		}
	}
	sort.Strings(out)
	return out
}

// Snapshot is a consistent copy of the store's books.
type Snapshot struct {
	SKUs      map[string]skuState `json:"skus"`
	Leader    uint64              `json:"leader"`
	Recovered []string            `json:"recovered"`
}

func (s *Store) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Snapshot{SKUs: map[string]skuState{}, Leader: s.leader, Recovered: append([]string(nil), s.recovered...)}
	for k, st := range s.skus {
		snap.SKUs[k] = *st
	}
	return snap
}

// SoldOut reports whether every SKU's stock is zero.
func (snap Snapshot) SoldOut() bool {
	for _, st := range snap.SKUs {
		if st.Stock > 0 {
			return false
		}
	}
	return true
}

// Totals sums ops, handoffs and sold units over the SKUs.
func (snap Snapshot) Totals() (ops, handoffs, sold int) {
	for _, st := range snap.SKUs {
		ops += st.Ops
		handoffs += st.Handoffs
		sold += st.Sold
	}
	return
}

// --- HTTP: the same store, reachable from child processes ---

// Serve serves the store on ln until ln is closed.
func (s *Store) Serve(ln net.Listener) *http.Server {
	mux := http.NewServeMux()
	u64 := func(r *http.Request, k string) uint64 { v, _ := strconv.ParseUint(r.FormValue(k), 10, 64); return v }
	reply := func(w http.ResponseWriter, v int, err error) {
		switch {
		case errors.Is(err, ErrStale):
			http.Error(w, err.Error(), http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadRequest)
		default:
			fmt.Fprint(w, v)
		}
	}
	mux.HandleFunc("POST /enter", func(w http.ResponseWriter, r *http.Request) {
		v, err := s.Enter(r.FormValue("sku"), u64(r, "token"), u64(r, "node"), u64(r, "leader"))
		reply(w, v, err)
	})
	mux.HandleFunc("POST /write", func(w http.ResponseWriter, r *http.Request) {
		v, _ := strconv.Atoi(r.FormValue("stock"))
		reply(w, 0, s.Write(r.FormValue("sku"), u64(r, "token"), v))
	})
	mux.HandleFunc("POST /exit", func(w http.ResponseWriter, r *http.Request) {
		reply(w, 0, s.Exit(r.FormValue("sku"), u64(r, "token")))
	})
	mux.HandleFunc("GET /highest", func(w http.ResponseWriter, r *http.Request) {
		v, err := s.Highest(r.FormValue("sku"))
		reply(w, int(v), err)
	})
	mux.HandleFunc("GET /snapshot", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(s.Snapshot())
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	return srv
}

// StoreClient is a Resource backed by a Store served over HTTP.
type StoreClient struct {
	base string
	hc   *http.Client
}

func NewStoreClient(base string) *StoreClient {
	return &StoreClient{base: base, hc: &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64},
	}}
}

func (c *StoreClient) call(method, path string, form url.Values) (int, error) {
	var resp *http.Response
	var err error
	if method == http.MethodGet {
		resp, err = c.hc.Get(c.base + path + "?" + form.Encode())
	} else {
		resp, err = c.hc.PostForm(c.base+path, form)
	}
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		v, _ := strconv.Atoi(string(body))
		return v, nil
	case http.StatusConflict:
		return 0, ErrStale
	default:
		return 0, fmt.Errorf("store: %s %s: %s", path, resp.Status, body)
	}
}

func f(kv ...any) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i].(string), fmt.Sprint(kv[i+1]))
	}
	return v
}

func (c *StoreClient) Enter(sku string, token, node, leader uint64) (int, error) {
	return c.call(http.MethodPost, "/enter", f("sku", sku, "token", token, "node", node, "leader", leader))
}

func (c *StoreClient) Write(sku string, token uint64, stock int) error {
	_, err := c.call(http.MethodPost, "/write", f("sku", sku, "token", token, "stock", stock))
	return err
}

func (c *StoreClient) Exit(sku string, token uint64) error {
	_, err := c.call(http.MethodPost, "/exit", f("sku", sku, "token", token))
	return err
}

func (c *StoreClient) Highest(sku string) (uint64, error) {
	v, err := c.call(http.MethodGet, "/highest", f("sku", sku))
	return uint64(v), err
}
