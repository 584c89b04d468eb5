package testenv

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// PeerPID finds which of pids owns the client end of a loopback TCP
// connection whose remote address (as the server sees it) is remote: the
// socket's inode from /proc/net/tcp, then the process holding it. Linux
// only; 0 when not found.
func PeerPID(remote string, pids []int) int {
	_, portStr, err := net.SplitHostPort(remote)
	if err != nil {
		return 0
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return 0
	}
	inode := ""
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if inode = socketInode(table, port); inode != "" {
			break
		}
	}
	if inode == "" {
		return 0
	}
	want := "socket:[" + inode + "]"
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, ent := range ents {
			if link, err := os.Readlink(dir + "/" + ent.Name()); err == nil && link == want {
				return pid
			}
		}
	}
	return 0
}

// socketInode returns the inode of the socket whose local port is port.
func socketInode(table string, port int) string {
	fh, err := os.Open(table)
	if err != nil {
		return ""
	}
	defer fh.Close()
	hexPort := fmt.Sprintf(":%04X", port)
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || !strings.HasSuffix(f[1], hexPort) {
			continue
		}
		return f[9]
	}
	return ""
}
