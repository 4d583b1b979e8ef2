package fence

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// HTTP header names.
const (
	HeaderResource = "Lockraft-Fence-Resource"
	HeaderToken    = "Lockraft-Fence-Token"
	// HeaderHighest is set on a 409 response to a stale token: the fence it
	// was refused against.
	HeaderHighest = "Lockraft-Fence-Highest"
)

// Transport is an http.RoundTripper that sends the token WithToken put into
// a request's context as HeaderResource and HeaderToken. Requests without a
// token pass unchanged. It does not interpret responses (RoundTripper's
// contract); use CheckResponse for that.
type Transport struct {
	// Base does the round trip; nil means http.DefaultTransport.
	Base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	res, tok, ok := TokenFromContext(req.Context())
	if !ok {
		return base.RoundTrip(req)
	}
	r := req.Clone(req.Context()) // a RoundTripper must not modify the request
	r.Header.Set(HeaderResource, res)
	r.Header.Set(HeaderToken, strconv.FormatUint(tok, 10))
	return base.RoundTrip(r)
}

// CheckResponse returns a *StaleError (errors.Is ErrStaleToken) if resp is
// a fenced server's refusal of a stale token, nil otherwise. It reads only
// headers.
func CheckResponse(resp *http.Response) error {
	if resp.StatusCode != http.StatusConflict {
		return nil
	}
	h := resp.Header.Get(HeaderHighest)
	if h == "" {
		return nil
	}
	hi, _ := strconv.ParseUint(h, 10, 64)
	tok, _ := strconv.ParseUint(resp.Request.Header.Get(HeaderToken), 10, 64)
	return &StaleError{Resource: resp.Request.Header.Get(HeaderResource), Token: tok, Highest: hi}
}

// Middleware admits each request to next through store (see Store): a
// stale token gets 409 Conflict with HeaderHighest before next runs; a
// request without a token gets 400 (unless OptionalToken). next's response
// is held in memory until store's finish has run, so a 2xx the client sees
// means the work is committed: a response with status 400 or above counts
// as the handler failing (SQLStore rolls back); if the commit fails the
// client gets 503 instead of next's response (outcome unknown). Handlers
// that stream (Flush) are not suited to it.
func Middleware(store Store, next http.Handler, opts ...ServerOption) http.Handler {
	cfg := newServerConfig(opts)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resStr, tokStr := r.Header.Get(HeaderResource), r.Header.Get(HeaderToken)
		if resStr == "" && tokStr == "" {
			if cfg.optional {
				next.ServeHTTP(w, r)
				return
			}
			http.Error(w, ErrMissingToken.Error()+": send "+HeaderResource+" and "+HeaderToken, http.StatusBadRequest)
			return
		}
		tok, err := strconv.ParseUint(tokStr, 10, 64)
		if err != nil || tok == 0 || resStr == "" {
			http.Error(w, ErrMissingToken.Error(), http.StatusBadRequest)
			return
		}
		hctx, finish, err := store.Admit(r.Context(), resStr, tok)
		if err != nil {
			var se *StaleError
			switch {
			case errors.As(err, &se):
				w.Header().Set(HeaderHighest, strconv.FormatUint(se.Highest, 10))
				http.Error(w, se.Error(), http.StatusConflict)
			case errors.Is(err, ErrInvalid):
				http.Error(w, err.Error(), http.StatusBadRequest)
			default:
				http.Error(w, "fence: "+err.Error(), http.StatusServiceUnavailable)
			}
			return
		}
		bw := &bufferedWriter{header: http.Header{}, status: http.StatusOK}
		next.ServeHTTP(bw, r.WithContext(hctx))
		var herr error
		if bw.status >= 400 {
			herr = fmt.Errorf("handler answered %d", bw.status)
		}
		if ferr := finish(herr); ferr != nil && herr == nil {
			http.Error(w, "fence: handler's work not committed (outcome unknown): "+ferr.Error(), http.StatusServiceUnavailable)
			return
		}
		for k, v := range bw.header {
			w.Header()[k] = v
		}
		w.WriteHeader(bw.status)
		io.Copy(w, &bw.body)
	})
}

// bufferedWriter holds a handler's response until the fence's finish.
type bufferedWriter struct {
	header      http.Header
	status      int
	wroteHeader bool
	body        bytes.Buffer
}

func (b *bufferedWriter) Header() http.Header { return b.header }

func (b *bufferedWriter) WriteHeader(code int) {
	if !b.wroteHeader {
		b.status, b.wroteHeader = code, true
	}
}

func (b *bufferedWriter) Write(p []byte) (int, error) {
	b.wroteHeader = true
	return b.body.Write(p)
}
