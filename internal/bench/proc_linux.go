package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var terminate = syscall.SIGTERM

// childAttr makes a child die with the bench even when the bench is
// killed without running its cleanup.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// userHZ is the unit of utime and stime in /proc/<pid>/stat: USER_HZ,
// 100 on every Linux architecture Go supports (part of the user ABI).
const userHZ = 100

// procStats reads a live process's CPU time (user + system, all threads)
// and its peak resident set size (VmHWM).
func procStats(pid int) (cpu time.Duration, peakRSS int64, err error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may hold spaces: fields count from the
	// last ')'. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	cpu = time.Duration(utime+stime) * time.Second / userHZ

	peakRSS, err = procStatus(pid, "VmHWM")
	if err != nil {
		return 0, 0, err
	}
	return cpu, peakRSS, nil
}

// procRSS reads a live process's resident set size now (VmRSS).
func procRSS(pid int) (int64, error) { return procStatus(pid, "VmRSS") }

// procRSSAnon reads the anonymous part of a live process's resident set
// (RssAnon: without file-backed pages such as its executable's code).
func procRSSAnon(pid int) (int64, error) { return procStatus(pid, "RssAnon") }

// procStatus reads a size in kB from /proc/<pid>/status, in bytes.
func procStatus(pid int, field string) (int64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: %s %q", pid, field, v)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, field)
}

// flushDisk writes the machine's dirty pages back and waits (sync(2) waits
// for the writeback on Linux).
func flushDisk() error {
	syscall.Sync()
	return nil
}
