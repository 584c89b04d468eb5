package proc

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// FreePort is a loopback TCP port that was free a moment ago. With
// offset > 0, port+offset was free too (a Redis Cluster node's bus port is
// its port + 10000).
func FreePort(offset int) (int, error) {
	for range 200 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if offset == 0 {
			return port, nil
		}
		if port+offset > 65535 {
			continue
		}
		b, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+offset))
		if err != nil {
			continue
		}
		_ = b.Close()
		return port, nil
	}
	return 0, errors.New("no free loopback port")
}

// lostPortRace reports whether a server that would not start lost the
// race for a port it was given: another process bound it between the
// probe and the server's bind.
func lostPortRace(p *Proc) bool {
	log := strings.ToLower(LastLines(p.Log(), 20))
	return strings.Contains(log, "address already in use")
}
