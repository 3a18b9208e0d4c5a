package testenv

import "net"

// freePorts returns n distinct ports free on 127.0.0.1 a moment ago: all n
// listeners are held at once, so the kernel cannot hand out one port
// twice. Another process may still take one before the server binds it;
// servers that share ports (a cluster's members) must get them from one
// call, or a member can find its port taken by another and fail late.
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}
