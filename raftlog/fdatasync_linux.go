package raftlog

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data (and the size, not the other metadata) to the disk.
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
