package proc

import "syscall"

// childAttr makes a child die with its parent even when the parent is
// killed without running its cleanup (a test's timeout panic, SIGQUIT, a
// SIGKILLed bench), so no server is left listening on the machine.
//
// It also puts the child in a process group of its own: a child stopped
// on purpose (a zombie test's SIGSTOP) in its parent's group would be sent
// SIGHUP and SIGCONT by the kernel when that group becomes orphaned (a
// group whose only link to its session is a process that exits), and,
// where SIGHUP is ignored (under nohup), go on at once. In a group of its
// own whose parent stays in another group of the session, it stays
// stopped until the test continues it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
