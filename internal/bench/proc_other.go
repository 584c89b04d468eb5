//go:build !linux

package bench

import (
	"errors"
	"os"
	"syscall"
	"time"
)

var terminate os.Signal = syscall.SIGTERM

func childAttr() *syscall.SysProcAttr { return nil }

// procStats needs /proc: the bench reports worker CPU and RSS on Linux only.
func procStats(int) (time.Duration, int64, error) {
	return 0, 0, errors.New("worker CPU and RSS are measured from /proc, on Linux only")
}

func procRSS(int) (int64, error) {
	return 0, errors.New("worker RSS is measured from /proc, on Linux only")
}

func procRSSAnon(int) (int64, error) {
	return 0, errors.New("worker RSS is measured from /proc, on Linux only")
}

// flushDisk is a no-op here: the history phase settles the disk on Linux.
func flushDisk() error { return nil }
