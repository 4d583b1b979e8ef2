package transport

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The header-list attack
//
// Every stream's headers are decoded before any check of ours runs, and a
// stream that is admitted keeps them (its metadata) for as long as it is
// open. HPACK lets a client name a field of its dynamic table in one byte,
// so a few KiB on the wire can stand for a header list of many MiB, and a
// binary ("-bin") field is decoded into a copy of its own at each mention.
// headerBombStreams opens the streams a light member's certificate may
// keep open (its calls), each with such a list, sends nothing else, and
// holds them: the node's memory must stay bounded (runAttack's bounds).
// It speaks HTTP/2 itself, as an attacker would, so the size limit the
// server announces binds only if the server enforces it.

// headerAttack is the attack's payload name (attackSpec.Payload): header
// lists, not messages.
const headerAttack = "headers"

// headerBombFields is how many times one binary field is mentioned in a
// stream's header list: about 16 MiB uncompressed, gRPC's default limit.
const headerBombFields = 16<<20/(4096+32) - 16

// headerBomb is a header block for a call to method of light member from,
// with the repeated binary field.
func headerBomb(method string, from uint64) []byte {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "https"},
		{Name: ":path", Value: method},
		{Name: ":authority", Value: "victim"},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "te", Value: "trailers"},
		{Name: mdCluster, Value: "c1"},
		{Name: mdFrom, Value: strconv.FormatUint(from, 10)},
	} {
		_ = enc.WriteField(f)
	}
	pad := hpack.HeaderField{Name: "x-pad-bin", Value: base64.RawStdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 3000))}
	for range headerBombFields {
		_ = enc.WriteField(pad) // after the first, one byte: the field's index in the dynamic table
	}
	return buf.Bytes()
}

// headerBombStreams is the attacker's side (run in TestAttackerProcess):
// attackConns connections, each opening attackStreams streams whose header
// lists are headerBomb, until done is closed. It returns how many streams
// it opened.
func headerBombStreams(t *testing.T, spec attackSpec, pair tls.Certificate, done <-chan struct{}) int64 {
	block := headerBomb(spec.Method, spec.ID)
	var opened sync.WaitGroup
	var mu sync.Mutex
	var n int64
	for range attackConns {
		opened.Go(func() {
			conn, err := tls.Dial("tcp", spec.Addr, &tls.Config{
				MinVersion:         tls.VersionTLS13,
				InsecureSkipVerify: true, // the attacker trusts anyone
				Certificates:       []tls.Certificate{pair},
				NextProtos:         []string{"h2"},
			})
			if err != nil {
				t.Logf("attacker: dial: %v", err)
				return
			}
			defer conn.Close()
			var wmu sync.Mutex
			fr := http2.NewFramer(conn, conn)
			fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
			if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
				return
			}
			wmu.Lock()
			_ = fr.WriteSettings()
			wmu.Unlock()
			// Read what the server sends: acknowledge its settings and pings.
			go func() {
				for {
					f, err := fr.ReadFrame()
					if err != nil {
						return
					}
					wmu.Lock()
					switch f := f.(type) {
					case *http2.SettingsFrame:
						if !f.IsAck() {
							_ = fr.WriteSettingsAck()
						}
					case *http2.PingFrame:
						if !f.IsAck() {
							_ = fr.WritePing(true, f.Data)
						}
					}
					wmu.Unlock()
				}
			}()
			const maxFrame = 16 << 10
			for i := range attackStreams {
				id := uint32(2*i + 1)
				wmu.Lock()
				first := block[:min(len(block), maxFrame)]
				err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first,
					EndHeaders: len(block) <= maxFrame})
				for rest := block[len(first):]; err == nil && len(rest) > 0; {
					chunk := rest[:min(len(rest), maxFrame)]
					rest = rest[len(chunk):]
					err = fr.WriteContinuation(id, len(rest) == 0, chunk)
				}
				wmu.Unlock()
				if err != nil {
					t.Logf("attacker: headers: %v", err)
					return
				}
				mu.Lock()
				n++
				mu.Unlock()
			}
			select {
			case <-done:
			case <-time.After(time.Hour):
			}
		})
	}
	opened.Wait()
	return n
}
