package testenv

import "strings"

// startOnFreePorts calls start with n ports free on 127.0.0.1 a moment
// ago, and again with new ones (five tries in all) while its error says
// that a port was taken ("in use") before the server bound it. It returns
// start's last error.
func startOnFreePorts(n int, start func(ports []int) error) error {
	for attempt := 0; ; attempt++ {
		ports, err := freePorts(n)
		if err == nil {
			err = start(ports)
		}
		if err == nil || attempt == 4 || !strings.Contains(err.Error(), "in use") {
			return err
		}
	}
}
