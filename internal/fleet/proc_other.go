//go:build !linux

package fleet

import "syscall"

// childAttr: no parent-death signal outside Linux; cleanup stops the
// children.
func childAttr() *syscall.SysProcAttr { return nil }
