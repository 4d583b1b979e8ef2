// Package scriptarg reads the arguments of the commands in golden test
// scripts (github.com/cockroachdb/datadriven), for the packages whose tests
// run such scripts: lockfsm and node/internal/lease. Only tests import it.
//
// An argument is key=value, key=(v1,v2,...) or a bare key. A value that
// should be a number and is not fails the test at the script's line.
package scriptarg

import (
	"strconv"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// Uint is key's (first) value as a number, def without the key.
func Uint(t testing.TB, td *datadriven.TestData, key string, def uint64) uint64 {
	t.Helper()
	for _, a := range td.CmdArgs {
		if a.Key == key {
			v, err := strconv.ParseUint(a.Vals[0], 10, 64)
			if err != nil {
				t.Fatalf("%s: %s=%v: %v", td.Pos, key, a.Vals, err)
			}
			return v
		}
	}
	return def
}

// String is key's (first) value, "" without the key or without a value.
func String(td *datadriven.TestData, key string) string {
	for _, a := range td.CmdArgs {
		if a.Key == key && len(a.Vals) > 0 {
			return a.Vals[0]
		}
	}
	return ""
}

// Vals is key's values, nil without the key.
func Vals(td *datadriven.TestData, key string) []string {
	for _, a := range td.CmdArgs {
		if a.Key == key {
			return a.Vals
		}
	}
	return nil
}

// Uints is the values of every key argument, as numbers.
func Uints(t testing.TB, td *datadriven.TestData, key string) []uint64 {
	t.Helper()
	var ids []uint64
	for _, a := range td.CmdArgs {
		if a.Key != key {
			continue
		}
		for _, v := range a.Vals {
			id, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("%s: %s: %v", td.Pos, key, err)
			}
			ids = append(ids, id)
		}
	}
	return ids
}
