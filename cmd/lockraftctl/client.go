package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// unreachableError: the endpoint could not be reached or did not answer
// like a lockraft admin handler (exit code 3).
type unreachableError struct {
	endpoint string
	err      error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("cannot reach the admin endpoint %s: %s (is the service running, and is -endpoint the URL its admin handler is mounted at?)",
		clean(e.endpoint), clean(e.err.Error()))
}

func (e *unreachableError) Unwrap() error { return e.err }

// serverError: the handler answered with an error (exit code 1).
type serverError struct {
	status int
	code   string
	msg    string
	leader string
}

func (e *serverError) Error() string {
	s := fmt.Sprintf("%s (HTTP %d, %s)", clean(e.msg), e.status, clean(e.code))
	if e.leader != "" {
		s += fmt.Sprintf("; the leader is %s: ask its admin endpoint", clean(e.leader))
	}
	if e.status == http.StatusUnauthorized {
		s += "; give an operator's client certificate (-cert, -key) or token (-token-file, $LOCKRAFT_TOKEN)"
	}
	return s
}

// maxServerWait is the longest ?timeout= the admin handler takes.
const maxServerWait = 60 * time.Second

// answerMargin is how much longer than the handler's own bound (?timeout=)
// the client waits for its answer: the handler's "unavailable" reaches the
// user instead of a client-side timeout that reads as an unreachable
// endpoint.
const answerMargin = time.Second

// call does one request and returns the raw JSON body of a 2xx answer.
func (c *cli) call(method, path string, q url.Values) ([]byte, error) {
	if q == nil {
		q = url.Values{}
	}
	if c.stale {
		q.Set("stale", "1")
	}
	q.Set("timeout", min(c.timeout, maxServerWait).String())
	u := c.endpoint + path + "?" + q.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout+answerMargin)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, &unreachableError{c.endpoint, err}
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, &unreachableError{c.endpoint, err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, &unreachableError{c.endpoint, err}
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return nil, &unreachableError{c.endpoint, fmt.Errorf("HTTP %d with %q, not a lockraft admin answer", resp.StatusCode, resp.Header.Get("Content-Type"))}
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error  string `json:"error"`
			Code   string `json:"code"`
			Leader string `json:"leader"`
			Reason string `json:"reason"`
		}
		if json.Unmarshal(body, &e) != nil || (e.Error == "" && e.Reason == "") {
			return nil, &unreachableError{c.endpoint, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(body))}
		}
		if e.Error == "" {
			e.Error = e.Reason
		}
		return nil, &serverError{status: resp.StatusCode, code: e.Code, msg: e.Error, leader: e.Leader}
	}
	return body, nil
}

// get calls and decodes into out; with -o json it prints the body as is.
func (c *cli) get(method, path string, q url.Values, out any) (printed bool, err error) {
	body, err := c.call(method, path, q)
	if err != nil {
		return false, err
	}
	if c.output == "json" {
		_, err := c.out.Write(cleanJSON(body))
		return true, err
	}
	if err := json.Unmarshal(body, out); err != nil {
		return false, &unreachableError{c.endpoint, fmt.Errorf("bad JSON: %v", err)}
	}
	return false, nil
}
