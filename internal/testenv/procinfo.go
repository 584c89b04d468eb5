package testenv

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// ExitStatus says how a process a test ran ended: "signal killed",
// "exit 1", or err when it never ran.
func ExitStatus(cmd *exec.Cmd, err error) string {
	if cmd.ProcessState == nil {
		return fmt.Sprint(err)
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return fmt.Sprintf("exit %d", cmd.ProcessState.ExitCode())
}

// LastLines is the last n lines of the file at path ("" when unreadable),
// e.g. a process's log for a failure message.
func LastLines(path string, n int) string {
	fh, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer fh.Close()
	var lines []string
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// PrintList writes a report's list as "title (n):" and the first 20 items,
// one per line; nothing when items is empty.
func PrintList(w io.Writer, title string, items []string) {
	if len(items) == 0 {
		return
	}
	fmt.Fprintf(w, "%s (%d):\n", title, len(items))
	for i, s := range items {
		if i == 20 {
			fmt.Fprintf(w, "  ... %d more\n", len(items)-20)
			break
		}
		fmt.Fprintf(w, "  %s\n", s)
	}
}
