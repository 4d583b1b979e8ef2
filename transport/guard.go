package transport

import (
	"bytes"
	"io"
	"net"
	"time"

	"google.golang.org/grpc/credentials"
)

// Connection guard
//
// Every incoming connection passes guardCreds before gRPC sees it: the TLS
// handshake (mutual, see tls.go) or, in plaintext mode, nothing, and then a
// check that the peer opens with the HTTP/2 client preface, all within
// handshakeTimeout. A connection that fails (a plaintext client on a TLS
// port, garbage bytes, a certificate of another CA or cluster, an expired
// one, a port scanner that says nothing) is closed and logged once per
// source address and interval (refuse.Log), not once per connection. One
// that passes is admitted (admission.go: admitConn).

// handshakeTimeout bounds the TLS handshake and the preface of an incoming
// connection.
const handshakeTimeout = 10 * time.Second

// http2Preface is what every HTTP/2 (so gRPC) client sends first (RFC 9113
// §3.4).
var http2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// refusedConn is the refuse.Log kind of rejected connections.
const refusedConn = "connection"

type guardCreds struct {
	credentials.TransportCredentials
	t *Transport
}

func (g guardCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	_ = raw.SetDeadline(time.Now().Add(handshakeTimeout))
	conn, info, err := g.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		g.t.refused.Refuse(refusedConn, hostOf(raw.RemoteAddr()), "reason", "handshake failed", "err", err)
		return nil, nil, err
	}
	got := make([]byte, len(http2Preface))
	if _, err := io.ReadFull(conn, got); err != nil || !bytes.Equal(got, http2Preface) {
		g.t.refused.Refuse(refusedConn, hostOf(raw.RemoteAddr()), "reason", "not a gRPC client (no HTTP/2 preface)")
		_ = conn.Close()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return nil, nil, err
	}
	tc, err := g.t.admitConn(raw, info)
	if err != nil {
		g.t.refused.Refuse(refusedConn, hostOf(raw.RemoteAddr()), "reason", "not admitted", "err", err)
		_ = conn.Close()
		return nil, nil, err
	}
	_ = raw.SetDeadline(time.Time{})
	return &replayConn{Conn: conn, pending: got}, connAuth{AuthInfo: info, conn: tc}, nil
}

func (g guardCreds) Clone() credentials.TransportCredentials {
	return guardCreds{TransportCredentials: g.TransportCredentials.Clone(), t: g.t}
}

// replayConn returns the bytes read by the guard before reading on.
type replayConn struct {
	net.Conn
	pending []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
