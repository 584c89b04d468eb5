//go:build !linux

package proc

import "syscall"

// childAttr: no parent-death signal outside Linux; Stop ends the children.
func childAttr() *syscall.SysProcAttr { return nil }
