package main

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// What the admin endpoint answers is shown on an operator's terminal, and
// parts of it are chosen by whoever names a lock or an owner (any client of
// the service). A terminal acts on control characters (ESC sequences move
// the cursor, recolour, retitle the window, write to the clipboard) and
// Unicode format characters reorder what follows (U+202E), so such a string
// could forge or hide what lockraftctl prints. Every string from the
// endpoint goes through clean (tables, messages) or cleanJSON (-o json).

// clean returns s unchanged if every rune of it is printable, else quoted
// with Go's escapes ("\x1b[31m", "\u202e"), so that it is shown, not acted
// on; an unprintable name is thus told from a printable one.
func clean(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return s
	}
	return strconv.Quote(s)
}

// cleans applies clean to each of ss.
func cleans(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = clean(s)
	}
	return out
}

// cleanJSON returns the JSON document b with every rune a terminal would
// act on and JSON leaves raw (DEL, C1 controls, format and other
// unprintable characters, invalid UTF-8) written as a \u escape: the
// document means the same (such runes occur only inside strings; JSON
// already escapes the C0 controls there).
func cleanJSON(b []byte) []byte {
	var out bytes.Buffer
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && n <= 1:
			out.WriteString(`\ufffd`)
		case r < utf8.RuneSelf && (r >= 0x20 && r != 0x7f || r == '\n' || r == '\t' || r == '\r'):
			out.WriteByte(byte(r))
		case r >= utf8.RuneSelf && unicode.IsPrint(r):
			out.Write(b[:n])
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&out, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&out, `\u%04x`, r)
		}
		b = b[n:]
	}
	return out.Bytes()
}
