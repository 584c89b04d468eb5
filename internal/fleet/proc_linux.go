package fleet

import "syscall"

// childAttr makes a child die with the test even when the test process is
// killed without running its cleanup (a timeout's panic, SIGQUIT), so no
// server is left listening on the machine.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
