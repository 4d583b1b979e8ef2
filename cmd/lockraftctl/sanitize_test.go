package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft"
)

// Strings a client of the service chooses, meant for a terminal.
const (
	red     = "\x1b[31mstock/red\x1b[0m"
	retitle = "owner\x1b]0;pwned\x07"
	rtl     = "evil\u202egnp.exe"
	c1      = "csi\u009b2J"
	tabbed  = "a\tb"
)

// hostile answers every view with hostile strings (the endpoint or its
// clients control them).
func hostile(t *testing.T) *httptest.Server {
	holder := lockraft.HolderView{Owner: retitle, Session: 7, Member: 2, Token: 9, HoldCount: 1, GrantedAt: time.Now()}
	waiter := lockraft.WaiterView{Position: 1, Owner: rtl, Session: 8, Member: 3, Enqueued: 10, EnqueuedAt: time.Now()}
	lock := lockraft.LockView{Name: red, Primitive: "mutex", Holder: &holder, Holds: []lockraft.HolderView{holder},
		Waiters: []lockraft.WaiterView{waiter}}
	views := map[string]any{
		lockraft.AdminLockPath:  lock,
		lockraft.AdminLocksPath: lockraft.LocksPage{Locks: []lockraft.LockView{lock, {Name: c1, Waiters: []lockraft.WaiterView{waiter}}}, Next: tabbed},
		lockraft.AdminStatusPath: lockraft.StatusView{ID: 1, Role: "voter\x1b[2K", Leader: 1, Addr: "127.0.0.1:1\x07",
			Version: "v1\u202e"},
		lockraft.AdminMembersPath: lockraft.MembersView{Members: []lockraft.MemberView{{ID: 1, Role: "voter\x1b[1A", RaftAddr: retitle,
			Gossip: rtl}}, FromLeader: true},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == lockraft.AdminTransferPath {
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "refused " + red, "code": "refused\x1b[0m"})
			return
		}
		_ = json.NewEncoder(w).Encode(views[r.URL.Path])
	}))
	t.Cleanup(srv.Close)
	return srv
}

// acts reports whether s holds anything a terminal would act on.
func acts(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool {
		return r != '\n' && r != '\t' && !unicode.IsPrint(r) && r != ' '
	}) >= 0
}

// Lock names, owners and every other string the endpoint answers reach the
// terminal escaped, in tables, JSON and error messages: no escape
// sequence, bell, C1 control or bidi override gets through, and each shows
// as its escaped form.
func TestOutputSanitised(t *testing.T) {
	srv := hostile(t)
	for _, args := range [][]string{
		{"lock", "x"}, {"locks"}, {"status"}, {"members"},
		{"-o", "json", "lock", "x"}, {"-o", "json", "locks"}, {"-o", "json", "status"}, {"-o", "json", "members"},
		{"leader", "transfer"},
	} {
		code, out, errs := ctl(append([]string{"-endpoint", srv.URL}, args...)...)
		require.False(t, acts(out), "%v printed %q", args, out)
		require.False(t, acts(errs), "%v printed %q", args, errs)
		if args[0] == "leader" {
			require.Equal(t, exitServerError, code)
			require.Contains(t, errs, `"refused \x1b[31mstock/red\x1b[0m"`)
			continue
		}
		require.Equal(t, exitOK, code, errs)
		if args[0] == "-o" {
			var v any
			require.NoError(t, json.Unmarshal([]byte(out), &v), "%v: still JSON", args)
		}
	}
	_, out, _ := ctl("-endpoint", srv.URL, "lock", "x")
	require.Contains(t, out, `"\x1b[31mstock/red\x1b[0m"`)
	require.Contains(t, out, `"owner\x1b]0;pwned\a"`)
	require.Contains(t, out, `"evil\u202egnp.exe"`)
	_, out, _ = ctl("-endpoint", srv.URL, "locks")
	require.Contains(t, out, `"csi\u009b2J"`)
	require.Contains(t, out, `(more after "a\tb"`)
	_, out, _ = ctl("-endpoint", srv.URL, "-o", "json", "locks")
	var page lockraft.LocksPage
	require.NoError(t, json.Unmarshal([]byte(out), &page))
	require.Equal(t, red, page.Locks[0].Name, "the JSON still says what the endpoint said")
	require.Equal(t, c1, page.Locks[1].Name)
	require.Equal(t, rtl, page.Locks[0].Waiters[0].Owner)

	require.Equal(t, "stock/sku-1", clean("stock/sku-1"))
	require.Equal(t, "naïve ✓", clean("naïve ✓"))
	require.Equal(t, `"\xff"`, clean("\xff"))
	require.Equal(t, `{"a":"\ufffd\u202e\u007f"}`, string(cleanJSON([]byte("{\"a\":\"\xff\u202e\x7f\"}"))))
}
