package cli

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/baton-go/baton/etcdstore"
	"github.com/baton-go/baton/redisstore"
)

// appHelp is --app's help. Two services that pick the same lock name on
// one store would otherwise share the lock, and one of them would not run.
const appHelp = "the application that owns the lock names, so that another application's lock of the same name is never the same lock: " +
	"the Kubernetes backends label the lock objects (baton.dev/app) and refuse another application's object of that name; " +
	"etcd keeps the application's locks under the key prefix /baton/apps/APP/ (default /baton/locks/), " +
	"redis and redlock under baton:APP: (default baton:); " +
	"letters, digits, '-', '_' and '.', at most 63 characters"

// etcdAppPrefix is the etcd key prefix of application app's locks. Lock
// names hold no '/', so the prefixes of two applications, and the default
// one, share no key.
func etcdAppPrefix(app string) string {
	if app == "" {
		return etcdstore.DefaultPrefix
	}
	return "/baton/apps/" + app + "/"
}

// redisAppPrefix is the Redis key prefix of application app's locks. A
// lock's keys start with the prefix and '{', which no application name
// holds, so the prefixes of two applications, and the default one, share
// no key or channel.
func redisAppPrefix(app string) string {
	if app == "" {
		return redisstore.DefaultPrefix
	}
	return redisstore.DefaultPrefix + app + ":"
}

// appWhere is what a store's description adds for application app whose
// keys are under prefix.
func appWhere(app, prefix string) string {
	if app == "" {
		return ""
	}
	return ", application " + app + " (keys under " + prefix + ")"
}

// checkApp refuses an --app value that is not a Kubernetes label value,
// the same rule on every backend, so that one name serves a service on
// any store.
func checkApp(app string) error {
	if errs := validation.IsValidLabelValue(app); len(errs) > 0 {
		return usageErrorf("--app %q is not a valid application name (a Kubernetes label value): %s", app, strings.Join(errs, "; "))
	}
	return nil
}
