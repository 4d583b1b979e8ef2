package lockraft

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Paths served by AdminHandler, relative to where it is mounted.
const (
	AdminHealthPath   = "/healthz"         // GET: 200 while the node serves (alive), else 503
	AdminReadyPath    = "/readyz"          // GET: 200 when this node has a session and knows a leader, else 503
	AdminStatusPath   = "/status"          // GET: this node (role, leader, session, raft indexes, table counts)
	AdminMembersPath  = "/members"         // GET: InspectMembers
	AdminLocksPath    = "/locks"           // GET ?prefix=&limit=&after=: InspectLocks
	AdminLockPath     = "/lock"            // GET ?name=: InspectLock (404 when the name is free)
	AdminTransferPath = "/leader/transfer" // POST ?to=ID (optional): TransferLeader; operator actions only
	AdminRemovePath   = "/members/remove"  // POST ?id=ID: RemoveMember; operator actions only
	adminDefaultWait  = 5 * time.Second    // per request, unless ?timeout=
	adminMaxWait      = 60 * time.Second   // largest ?timeout=
)

// AdminOption configures AdminHandler.
type AdminOption func(*adminConfig)

type adminConfig struct {
	operator bool
	auth     *OperatorAuth // WithOperatorAuth (admin_auth.go)
}

// WithOperatorActions lets the handler act, not only read: POST
// /leader/transfer and POST /members/remove. Without it they answer 403.
func WithOperatorActions() AdminOption { return func(c *adminConfig) { c.operator = true } }

// AdminHandler returns an http.Handler with health, readiness and JSON
// views of the inspection API, for the service to mount on its own mux (for
// example under /lockraft/ with http.StripPrefix). lockraft opens no port
// by itself.
//
// Authorisation: its views name lock owners and members, and operator
// actions change the cluster. WithOperatorAuth makes the handler serve only
// operators (a client certificate with the operator role, or a bearer
// token; the probes stay open); without it the handler checks nothing, so
// mount it where only operators (and the orchestrator's probes) can reach
// it, behind the service's own authentication. Enable WithOperatorActions
// only where operators are authenticated.
//
// Reads are linearizable unless ?stale=1; each request is bounded by
// ?timeout= (a Go duration, default 5s, at most 60s). Answers are JSON;
// errors are {"error": "...", "code": "..."} with an HTTP status: 400 bad
// input, 403 operator actions off, 404 no such lock or member, 405 wrong
// method, 409 not the leader (with "leader") or refused, 503 unavailable,
// closed, or a timeout.
func (n *Node) AdminHandler(opts ...AdminOption) http.Handler {
	var c adminConfig
	for _, o := range opts {
		o(&c)
	}
	a := &admin{n: n, cfg: c}
	mux := http.NewServeMux()
	mux.HandleFunc(AdminHealthPath, a.method(http.MethodGet, a.health, true))
	mux.HandleFunc(AdminReadyPath, a.method(http.MethodGet, a.ready, true))
	mux.HandleFunc(AdminStatusPath, a.get(a.status))
	mux.HandleFunc(AdminMembersPath, a.get(a.members))
	mux.HandleFunc(AdminLocksPath, a.get(a.locks))
	mux.HandleFunc(AdminLockPath, a.get(a.lock))
	mux.HandleFunc(AdminTransferPath, a.post(a.transfer))
	mux.HandleFunc(AdminRemovePath, a.post(a.remove))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no admin endpoint %s", r.URL.Path), nil)
	})
	return mux
}

type admin struct {
	n   *Node
	cfg adminConfig
}

// StatusView is the /status answer.
type StatusView struct {
	ID         MemberID `json:"id"`
	Version    string   `json:"version"`
	Role       string   `json:"role"`
	Leader     MemberID `json:"leader"`
	IsLeader   bool     `json:"is_leader"`
	Ready      bool     `json:"ready"`
	Session    uint64   `json:"session"`
	Term       uint64   `json:"term"`
	Commit     uint64   `json:"commit"`
	Applied    uint64   `json:"applied"`
	Addr       string   `json:"addr"`
	GossipAddr string   `json:"gossip_addr,omitempty"`
	LockNames  int      `json:"lock_names"`
	LocksHeld  int      `json:"locks_held"`
	Waiters    int      `json:"waiters"`
	Longest    int      `json:"longest_queue"`
	Sessions   int      `json:"sessions"`
}

type handlerFunc func(ctx context.Context, r *http.Request) (any, int, error)

func (a *admin) get(h handlerFunc) http.HandlerFunc  { return a.method(http.MethodGet, h, false) }
func (a *admin) post(h handlerFunc) http.HandlerFunc { return a.method(http.MethodPost, h, false) }

// method serves h for method m; a probe is open to all (WithOperatorAuth).
func (a *admin) method(m string, h handlerFunc, probe bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if auth := a.cfg.auth; auth != nil && !probe {
			if ok, why := auth.operator(r); !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="lockraft"`)
				writeError(w, http.StatusUnauthorized, "unauthorized", "operators only: "+why, nil)
				return
			}
		}
		if r.Method != m && !(m == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", m)
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" not allowed; use "+m, nil)
			return
		}
		wait := adminDefaultWait
		if s := r.URL.Query().Get("timeout"); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 || d > adminMaxWait {
				writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("timeout %q: want a duration in (0, %v]", s, adminMaxWait), nil)
				return
			}
			wait = d
		}
		ctx, cancel := context.WithTimeoutCause(r.Context(), wait, fmt.Errorf("%w: no answer within %v", ErrUnavailable, wait))
		defer cancel()
		v, code, err := h(ctx, r)
		if err != nil {
			a.writeErr(w, err)
			return
		}
		if code == 0 {
			code = http.StatusOK
		}
		writeJSON(w, code, v)
	}
}

func (a *admin) readOpts(r *http.Request) []InspectOption {
	if s := r.URL.Query().Get("stale"); s == "1" || s == "true" {
		return []InspectOption{Stale()}
	}
	return nil
}

func (a *admin) health(context.Context, *http.Request) (any, int, error) {
	if _, _, err := a.n.n.Serving(); err != nil {
		return map[string]string{"status": "stopped", "error": err.Error()}, http.StatusServiceUnavailable, nil
	}
	return map[string]string{"status": "ok"}, 0, nil
}

func (a *admin) ready(context.Context, *http.Request) (any, int, error) {
	sess, lead, err := a.n.n.Serving()
	switch {
	case err != nil:
		return map[string]any{"ready": false, "reason": "stopped: " + err.Error()}, http.StatusServiceUnavailable, nil
	case lead == 0:
		return map[string]any{"ready": false, "reason": "no leader known"}, http.StatusServiceUnavailable, nil
	case sess == 0:
		return map[string]any{"ready": false, "reason": "session not open yet"}, http.StatusServiceUnavailable, nil
	}
	return map[string]any{"ready": true, "leader": MemberID(lead), "session": sess}, 0, nil
}

func (a *admin) status(ctx context.Context, _ *http.Request) (any, int, error) {
	s, err := a.n.n.MetricsSnapshot(ctx)
	if err != nil {
		return nil, 0, err
	}
	return StatusView{ID: MemberID(s.ID), Version: Version, Role: s.Role, Leader: MemberID(s.Leader), IsLeader: s.IsLeader,
		Ready: s.Session != 0 && s.Leader != 0, Session: s.Session, Term: s.Term, Commit: s.Commit, Applied: s.Applied,
		Addr: a.n.Addr(), GossipAddr: a.n.GossipAddr(), LockNames: s.Table.Names, LocksHeld: s.Table.Held,
		Waiters: s.Table.Waiters, Longest: s.Table.LongestQueue, Sessions: s.Table.Sessions}, 0, nil
}

func (a *admin) members(ctx context.Context, r *http.Request) (any, int, error) {
	v, err := a.n.InspectMembers(ctx, a.readOpts(r)...)
	return v, 0, err
}

func (a *admin) locks(ctx context.Context, r *http.Request) (any, int, error) {
	q := r.URL.Query()
	limit := 0
	if s := q.Get("limit"); s != "" {
		var err error
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > MaxPageLimit {
			return nil, 0, badRequest("limit %q: want 1..%d", s, MaxPageLimit)
		}
	}
	p, err := a.n.InspectLocks(ctx, q.Get("prefix"), q.Get("after"), limit, a.readOpts(r)...)
	return p, 0, err
}

func (a *admin) lock(ctx context.Context, r *http.Request) (any, int, error) {
	name := r.URL.Query().Get("name")
	if name == "" {
		return nil, 0, badRequest("name is required (?name=)")
	}
	v, found, err := a.n.InspectLock(ctx, name, a.readOpts(r)...)
	if err != nil {
		return nil, 0, err
	}
	if !found {
		return nil, 0, &adminError{status: http.StatusNotFound, code: "not_found",
			msg: fmt.Sprintf("%q is free: nobody holds or waits for it", name)}
	}
	return v, 0, nil
}

func (a *admin) transfer(ctx context.Context, r *http.Request) (any, int, error) {
	if !a.cfg.operator {
		return nil, 0, forbidden()
	}
	var to MemberID
	if s := r.URL.Query().Get("to"); s != "" {
		var err error
		if to, err = ParseMemberID(s); err != nil {
			return nil, 0, badRequest("to: %v", err)
		}
	}
	l, err := a.n.TransferLeader(ctx, to)
	if err != nil {
		return nil, 0, err
	}
	return map[string]any{"leader": l}, 0, nil
}

func (a *admin) remove(ctx context.Context, r *http.Request) (any, int, error) {
	if !a.cfg.operator {
		return nil, 0, forbidden()
	}
	id, err := ParseMemberID(r.URL.Query().Get("id"))
	if err != nil {
		return nil, 0, badRequest("id: %v", err)
	}
	if err := a.n.RemoveMember(ctx, id); err != nil {
		return nil, 0, err
	}
	return map[string]any{"removed": id}, 0, nil
}

// adminError is an error with its HTTP status and code.
type adminError struct {
	status int
	code   string
	msg    string
}

func (e *adminError) Error() string { return e.msg }

func badRequest(format string, a ...any) error {
	return &adminError{status: http.StatusBadRequest, code: "bad_request", msg: fmt.Sprintf(format, a...)}
}

func forbidden() error {
	return &adminError{status: http.StatusForbidden, code: "forbidden",
		msg: "operator actions are off: mount the handler with lockraft.WithOperatorActions()"}
}

// writeErr maps an error to its status and code.
func (a *admin) writeErr(w http.ResponseWriter, err error) {
	var ae *adminError
	switch {
	case errors.As(err, &ae):
		writeError(w, ae.status, ae.code, ae.msg, nil)
	case errors.Is(err, ErrInvalidName), errors.Is(err, ErrInvalidConfig):
		writeError(w, http.StatusBadRequest, "bad_request", err.Error(), nil)
	case errors.Is(err, ErrNotMember):
		writeError(w, http.StatusNotFound, "not_member", err.Error(), nil)
	case errors.Is(err, ErrNotLeader):
		writeError(w, http.StatusConflict, "not_leader", err.Error(), map[string]any{"leader": a.n.LeaderID()})
	case errors.Is(err, ErrRefused):
		writeError(w, http.StatusConflict, "refused", err.Error(), nil)
	case errors.Is(err, ErrClosed), errors.Is(err, ErrRemoved), errors.Is(err, ErrStorage):
		writeError(w, http.StatusServiceUnavailable, "closed", err.Error(), nil)
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error(), nil)
	case errors.Is(err, context.Canceled):
		writeError(w, http.StatusServiceUnavailable, "canceled", err.Error(), nil)
	default:
		writeError(w, http.StatusInternalServerError, "internal", err.Error(), nil)
	}
}

func writeError(w http.ResponseWriter, status int, code, msg string, extra map[string]any) {
	body := map[string]any{"error": msg, "code": code}
	for k, v := range extra {
		body[k] = v
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
