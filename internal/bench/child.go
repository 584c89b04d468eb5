package bench

import (
	"os/exec"
	"time"
)

// child is a process the bench started: a redis-server or a worker.
type child struct {
	cmd   *exec.Cmd
	exitc chan struct{} // closed once the process exited
	err   error         // its exit status, set before exitc closes
}

// startChild starts cmd and waits for it in the background; drain, when
// set, runs first (reading the process's stdout pipe to its end, as
// exec.Cmd.Wait requires).
func startChild(cmd *exec.Cmd, drain func()) (*child, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = childAttr()
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, exitc: make(chan struct{})}
	go func() {
		if drain != nil {
			drain()
		}
		c.err = cmd.Wait()
		close(c.exitc)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// stop sends SIGTERM, waits up to grace, then kills. It returns once the
// process is gone; stopping an exited process does nothing.
func (c *child) stop(grace time.Duration) {
	select {
	case <-c.exitc:
		return
	default:
	}
	_ = c.cmd.Process.Signal(terminate)
	select {
	case <-c.exitc:
	case <-time.After(grace):
		_ = c.cmd.Process.Kill()
		<-c.exitc
	}
}
