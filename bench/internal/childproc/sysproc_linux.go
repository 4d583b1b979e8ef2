package childproc

import "syscall"

// sysProcAttr puts a child in a process group of its own (a terminal's
// Ctrl-C goes to the command only, which stops its children in order) and
// has the kernel kill it if the command dies first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
