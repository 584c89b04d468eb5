package proc

import "syscall"

// childAttr makes a child die with its parent even when the parent is
// killed without running its cleanup (a test's timeout panic, SIGQUIT, a
// SIGKILLed bench), so no server is left listening on the machine.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
