//go:build !linux

package raftlog

import "os"

func fdatasync(f *os.File) error { return f.Sync() }
