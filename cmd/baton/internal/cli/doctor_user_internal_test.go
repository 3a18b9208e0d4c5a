package cli

import "testing"

// The user the permissions row's fix grants rules to is the URL's, also
// in a Sentinel or Cluster URL of IPv6 addresses, which url.Parse refuses:
// the fix said ACL SETUSER default, widening the default user's rights.
func TestURLUser(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://baton:pw@127.0.0.1:6379/0":              "baton",
		"redis://127.0.0.1:6379":                         "default",
		"redis://:pw@127.0.0.1:6379":                     "default",
		"redis+cluster://baton:pw@[::1]:7000,[::1]:7001": "baton",
		"redis+sentinel://baton:p%40ss@[fd00::1]:26379,[fd00::2]:26379/p?sentinel_password=x@y": "baton",
		"unix://baton:pw@/run/redis.sock": "baton",
	} {
		if got := urlUser(raw); got != want {
			t.Errorf("urlUser(%q) = %q, want %q", raw, got, want)
		}
	}
}
