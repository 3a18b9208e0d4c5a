package redisstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/baton-go/baton/backend"
	"github.com/redis/go-redis/v9"
)

// The URL forms of the highly available topologies (see the package
// documentation, "Topologies"):
//
//	redis+sentinel://[user:password@]HOST:PORT[,HOST:PORT...]/PRIMARY[/DB][?sentinel_password=P[&sentinel_username=U]]
//	redis+cluster://[user:password@]HOST:PORT,HOST:PORT[,...]
//
// The hosts are the sentinels' (first form) or the cluster nodes' (second);
// user and password are the data nodes' ACL credentials, and
// sentinel_username and sentinel_password the sentinels' (sentinels with
// requirepass or ACL users). rediss+sentinel and rediss+cluster use TLS
// with the system's roots. Other query parameters are refused.
const (
	schemeSentinel = "redis+sentinel"
	schemeCluster  = "redis+cluster"
)

// topology is a parsed redis+sentinel:// or redis+cluster:// URL.
type topology struct {
	kind     string // "Sentinel" or "Cluster"
	failover *redis.FailoverOptions
	cluster  *redis.ClusterOptions
}

func (t topology) client() redis.UniversalClient {
	if t.failover != nil {
		return redis.NewFailoverClient(t.failover)
	}
	return redis.NewClusterClient(t.cluster)
}

// parseTopology parses raw if its scheme is a topology's; ok reports
// whether it is.
func parseTopology(raw string) (t topology, ok bool, err error) {
	scheme, _, found := strings.Cut(raw, "://")
	tls := strings.HasPrefix(scheme, "rediss+")
	switch strings.Replace(scheme, "rediss+", "redis+", 1) {
	case schemeSentinel, schemeCluster:
	default:
		return topology{}, false, nil
	}
	if !found {
		return topology{}, true, fmt.Errorf("redisstore: %w: %q: want %s://HOST:PORT[,HOST:PORT...]", backend.ErrInvalidOptions, RedactURL(raw), scheme)
	}
	u, err := parseHostList(raw)
	if err != nil {
		return topology{}, true, fmt.Errorf("redisstore: %w: %w", backend.ErrInvalidOptions, parseError(raw, err))
	}
	if strayAt(u) {
		return topology{}, true, fmt.Errorf("redisstore: %w: %w", backend.ErrInvalidOptions, errEncoding)
	}
	addrs, err := hostList(u.Host)
	if err != nil {
		return topology{}, true, fmt.Errorf("redisstore: %w: %s: %v", backend.ErrInvalidOptions, redacted(u), err)
	}
	user, pass := u.User.Username(), ""
	if p, set := u.User.Password(); set {
		pass = p
	}
	if strings.HasSuffix(scheme, "sentinel") {
		t, err = sentinelTopology(u, addrs, user, pass)
	} else {
		t, err = clusterTopology(u, addrs, user, pass)
	}
	if err == nil && tls {
		t.setTLS(addrs)
	}
	return t, true, err
}

func sentinelTopology(u *url.URL, addrs []string, user, pass string) (topology, error) {
	path := strings.Split(strings.Trim(u.Path, "/"), "/")
	if path[0] == "" {
		return topology{}, fmt.Errorf("redisstore: %w: %s names no primary: write %s://SENTINEL:PORT,.../PRIMARY-NAME (the name the sentinels monitor, as in `sentinel monitor NAME ...`)",
			backend.ErrInvalidOptions, redacted(u), u.Scheme)
	}
	db := 0
	if len(path) > 1 {
		n, err := strconv.Atoi(path[1])
		if err != nil || n < 0 || len(path) > 2 {
			return topology{}, fmt.Errorf("redisstore: %w: %s: after the primary name only a database number may follow", backend.ErrInvalidOptions, redacted(u))
		}
		db = n
	}
	q := u.Query()
	for k := range q {
		if k != "sentinel_username" && k != "sentinel_password" {
			return topology{}, fmt.Errorf("redisstore: %w: %s: unknown parameter %q (a Sentinel URL takes sentinel_username and sentinel_password, the sentinels' own credentials)",
				backend.ErrInvalidOptions, redacted(u), k)
		}
	}
	return topology{kind: "Sentinel", failover: &redis.FailoverOptions{
		MasterName: path[0], SentinelAddrs: addrs, Username: user, Password: pass, DB: db,
		SentinelUsername: q.Get("sentinel_username"), SentinelPassword: q.Get("sentinel_password"),
		ContextTimeoutEnabled: true, DialerRetries: 1,
	}}, nil
}

func clusterTopology(u *url.URL, addrs []string, user, pass string) (topology, error) {
	if len(addrs) < 2 {
		return topology{}, fmt.Errorf("redisstore: %w: %s gives one node: give several (every primary, ideally), so that the client finds the cluster while one is down; for a single server use redis://",
			backend.ErrInvalidOptions, redacted(u))
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		return topology{}, fmt.Errorf("redisstore: %w: %s: a cluster has only database 0, there is no path", backend.ErrInvalidOptions, redacted(u))
	}
	if u.RawQuery != "" {
		return topology{}, fmt.Errorf("redisstore: %w: %s: a Cluster URL takes no parameters", backend.ErrInvalidOptions, redacted(u))
	}
	return topology{kind: "Cluster", cluster: &redis.ClusterOptions{
		Addrs: addrs, Username: user, Password: pass, ContextTimeoutEnabled: true, DialerRetries: 1,
	}}, nil
}

// setTLS turns TLS on with the system's roots (rediss+ schemes).
func (t *topology) setTLS(addrs []string) {
	host, _, _ := net.SplitHostPort(addrs[0])
	tc := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if t.failover != nil {
		t.failover.TLSConfig = tc
	} else {
		t.cluster.TLSConfig = tc
	}
}

// hostList splits "h1:p1,h2:p2" (IPv6 addresses in brackets: "[::1]:p")
// and checks each part.
func hostList(hosts string) ([]string, error) {
	var addrs []string
	for _, h := range strings.Split(hosts, ",") {
		_, port, err := net.SplitHostPort(h)
		if err != nil || port == "" {
			return nil, fmt.Errorf("address %q: want HOST:PORT (an IPv6 address in brackets: [::1]:PORT)", h)
		}
		if err := checkPort(port); err != nil {
			return nil, fmt.Errorf("address %q: %w", h, err)
		}
		addrs = append(addrs, h)
	}
	return addrs, nil
}

// checkPort refuses a port that is not a number from 1 to 65535, which
// would be dialled and retried as a server that does not answer.
func checkPort(port string) error {
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("the port %q is not a number from 1 to 65535", port)
	}
	return nil
}

// parseHostList is url.Parse for a URL whose host may be a list of
// addresses, IPv6 ones in brackets ("[::1]:26379,[::1]:26380"), which
// url.Parse refuses ("invalid IP-literal"): then everything between the
// user information and the path, query or fragment is the host, unchecked
// (see hostList).
func parseHostList(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	scheme, rest, found := strings.Cut(raw, "://")
	if err == nil || !found {
		return u, err
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndexByte(rest[:end], '@') + 1
	hosts := rest[at:end]
	if strings.ContainsFunc(hosts, notAddrChar) {
		return nil, err // not a list of addresses: url.Parse's word on it
	}
	u, err = url.Parse(scheme + "://" + rest[:at] + "host" + rest[end:])
	if err != nil {
		return nil, err
	}
	u.Host = hosts
	return u, nil
}

// notAddrChar reports whether r has no place in a list of host:port
// addresses.
func notAddrChar(r rune) bool {
	return !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._:[],", r)
}

// RedactURL returns a Redis URL with its passwords hidden, for logs and
// messages: the userinfo's, and the value of every query parameter but
// sentinel_username (sentinel_password, and a misspelling of it, which a
// message about an unknown parameter shows).
func RedactURL(raw string) string {
	u, err := parseHostList(raw)
	if err != nil || strayAt(u) {
		return "(unparsable URL)"
	}
	if q := u.Query(); len(q) > 0 {
		for k := range q {
			if k != "sentinel_username" {
				q.Set(k, "xxxxx")
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// redacted is RedactURL for a parsed URL.
func redacted(u *url.URL) string { return RedactURL(u.String()) }

// parseError is err, from parsing the Redis URL raw, without the URL
// itself, which *url.Error quotes whole, password included. If raw has
// user information, the parser's own words may quote a part of the
// password too (a '#', '?' or '/' in it ends the host early: invalid port
// ":<password>" after host), so they are replaced with the likely fix.
func parseError(raw string, err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	if strings.Contains(raw, "@") {
		return errEncoding
	}
	return fmt.Errorf("the URL does not parse: %w", ue.Err)
}

// errEncoding is the refusal of a URL with user information that does not
// parse, or that parses with the '@' outside it.
var errEncoding = errors.New("the URL does not parse: check its host and port, and write the characters '#', '?', '/', '@' and '%' of a user name or password percent-encoded (%23, %3F, %2F, %40, %25)")

// strayAt reports whether u, parsed from a URL with an '@', has it in its
// path, fragment or a query parameter's name instead of after its user
// information: a '#', '?' or '/' in a password that is not percent-encoded
// ended the host early (redis://:2024/x@host: host "", port 2024,
// database "x@host"), so the password would be dialled as a port or shown
// as a database. A parameter's value may hold an '@' (sentinel_password).
func strayAt(u *url.URL) bool {
	if u.User != nil {
		return false
	}
	if strings.Contains(u.Path+u.Fragment, "@") {
		return true
	}
	for k := range u.Query() {
		if strings.Contains(k, "@") {
			return true
		}
	}
	return false
}

// CheckURL reports whether raw is a URL Open accepts (redis://, rediss://,
// or a topology's form), without contacting anything. Errors match
// backend.ErrInvalidOptions and say what is wrong.
func CheckURL(raw string) error {
	if _, ok, err := parseTopology(raw); ok {
		return err
	}
	_, err := ParseURL(raw)
	return err
}
